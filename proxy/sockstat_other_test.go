//go:build !linux

package proxy

import (
	"net"
	"time"
)

// delivered, where the send queue cannot be read, waits a moment.
func delivered(net.Conn) bool {
	time.Sleep(50 * time.Millisecond)
	return true
}
