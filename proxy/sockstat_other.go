//go:build !linux

package proxy

import "net"

// ackedBytes is nil where TCP_INFO's acknowledged bytes cannot be read: a
// stalled client is then told only by writes that do not complete.
func ackedBytes(net.Conn) func() uint64 { return nil }

// unreadBytes cannot tell elsewhere: the reads the server has made are
// all there is to go by.
func unreadBytes(net.Conn) bool { return false }
