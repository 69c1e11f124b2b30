// Package sim is a simulated Anthropic API: an http.Handler that answers the
// Messages, Batches, Models and count_tokens endpoints well enough for the
// official SDKs, with deterministic replies and models of latency, shared
// capacity, rate limits, prompt caching and injected faults. The proxy's
// tests, the benchmark and the demo run it in-process instead of paying for
// and depending on the real API.
package sim
