package proxy

import (
	"net"

	"golang.org/x/sys/unix"
)

// delivered reports whether everything written on the client's side of c
// has reached the other end's socket (nothing left in its send queue
// unacknowledged), so that the server can see it.
func delivered(c net.Conn) bool {
	n := -1
	if sc, ok := c.(*net.TCPConn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			raw.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) })
		}
	}
	return n == 0
}
