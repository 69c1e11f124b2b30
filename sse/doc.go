// Package sse is the Anthropic API's server-sent events as sluice relays
// them: an upstream stream framed into whole events (Copy, bounded by
// MaxEventSize, read through pooled buffers), the event names the relay
// looks for, and a stream made whole again as the JSON Message it stands
// for (Reassemble, with StreamingBody, the request that asks for it). It
// knows nothing of the proxy: the proxy's relay (proxy/events.go) writes
// the events to the client and tallies their usage.
package sse
