package proxy

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// ackedBytes returns a probe of how many bytes the client's TCP stack has
// acknowledged on c (tcpi_bytes_acked), or nil where that cannot be had.
// It moves whenever the client takes bytes, however few: a client that
// reads nothing fills its receive window and it stops, while one that
// reads slowly moves it at its own pace, even in the middle of one of
// sluice's writes.
func ackedBytes(c net.Conn) func() uint64 {
	var raw syscall.RawConn
	walkConn(c, func(c net.Conn) bool {
		if sc, ok := c.(syscall.Conn); ok {
			raw, _ = sc.SyscallConn()
		}
		return raw != nil
	})
	if raw == nil {
		return nil
	}
	probe := func() (uint64, bool) {
		var n uint64
		ok := false
		raw.Control(func(fd uintptr) {
			if ti, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
				n, ok = ti.Bytes_acked, true
			}
		})
		return n, ok
	}
	if _, ok := probe(); !ok { // not TCP
		return nil
	}
	return func() uint64 { n, _ := probe(); return n }
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
