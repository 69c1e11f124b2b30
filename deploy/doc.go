// Package deploy holds the files for running sluice in production, and the
// tests that keep them true: for now Prometheus alert rules
// (prometheus/sluice-rules.yml). The package has no code; it exists so
// that `go test ./...` checks the files with the tools that load them
// (promtool). docs/deploy.md says how to use each file.
package deploy
