// Package clients holds the tests that point real clients at sluice: the
// official TypeScript SDK and Claude Code, installed from npm into this
// folder (npm ci --prefix clients; .ci/run does it). Outside CI the tests
// skip when the clients are not installed; in CI a missing client fails.
package clients
