// Package bench is sluice's load generator and report: it sends one
// scenario's workload through each mode (straight to the upstream, through
// sluice's plain path, through its windowed path), each against a fresh
// simulator with the same seed, and measures what clients and the upstream
// saw: outcomes, goodput, latency, upstream in-flight, queue depth, retries,
// tokens and cost. The command `sluice bench` only parses flags and calls Run.
package bench
