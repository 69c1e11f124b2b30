package proxy

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// ackedBytes returns a probe of how many bytes the client's TCP stack has
// acknowledged on c (tcpi_bytes_acked). It moves whenever the client
// takes bytes, however few: a client that reads nothing fills its receive
// window and it stops, while one that reads slowly moves it at its own
// pace, even in the middle of one of sluice's writes. The socket is found
// and asked only when the probe is first called (a stream's client falls
// behind): looked up for every stream, it cost each a system call and
// four allocations (docs/streams.md). Where TCP_INFO cannot be had (not
// TCP), the probe reports 0 for ever, and a stalled client is told only by
// writes that do not complete, as with no probe.
func ackedBytes(c net.Conn) func() uint64 {
	var raw syscall.RawConn
	looked := false
	return func() uint64 {
		if !looked {
			looked = true
			walkConn(c, func(c net.Conn) bool {
				if sc, ok := c.(syscall.Conn); ok {
					raw, _ = sc.SyscallConn()
				}
				return raw != nil
			})
		}
		if raw == nil {
			return 0
		}
		var n uint64
		raw.Control(func(fd uintptr) {
			if ti, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
				n = ti.Bytes_acked
			}
		})
		return n
	}
}

// unreadBytes reports whether bytes from the client wait unread in c's
// socket: the start of a request the server has not read yet.
func unreadBytes(c net.Conn) bool {
	n := 0
	walkConn(c, func(c net.Conn) bool {
		sc, ok := c.(syscall.Conn)
		if !ok {
			return false
		}
		if raw, err := sc.SyscallConn(); err == nil {
			raw.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
		}
		return true
	})
	return n > 0
}
