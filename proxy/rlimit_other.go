//go:build !unix

package proxy

// fileLimit is unknown here: MAX_PENDING_CONNS is not capped.
func fileLimit() uint64 { return 0 }
