package park

import (
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// epoller watches parked sockets with one epoll instance and one goroutine
// for all of them, so that a parked request costs no stack at all. It asks
// for readiness only (EPOLLIN, EPOLLRDHUP), one-shot, and never reads: the
// next request's bytes stay in the kernel for the server to read.
type epoller struct {
	epfd int
	wake int // an eventfd that stops the loop

	mu    sync.Mutex
	conns map[int32]*Response // by file descriptor, while watched
	done  chan struct{}       // closed when the loop has exited

	closeOnce sync.Once
}

// newPoller starts an epoller, or returns nil if the system will not give
// one (the goroutine watcher then serves).
func newPoller() *epoller {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(wake)
		return nil
	}
	p := &epoller{epfd: epfd, wake: wake, conns: map[int32]*Response{}, done: make(chan struct{})}
	go p.loop()
	return p
}

func (p *epoller) watch(rw *Response) {
	sc, err := rw.c.Conn.(syscall.Conn).SyscallConn()
	if err == nil {
		p.mu.Lock()
		cerr := sc.Control(func(fd uintptr) {
			ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: int32(fd)}
			if err = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev); err == nil {
				rw.fd = int32(fd)
				p.conns[rw.fd] = rw
			}
		})
		p.mu.Unlock()
		if err == nil {
			err = cerr
		}
	}
	if err != nil { // a closed socket, say: the end of the connection
		go rw.event(nil, true)
	}
}

// idle is called with rw.mu held.
func (p *epoller) idle(rw *Response, d time.Duration) {
	rw.idleTimer = time.AfterFunc(d, func() {
		if p.stop(rw) {
			rw.event(nil, true) // idle too long: the end of the connection
		}
	})
}

func (p *epoller) stop(rw *Response) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns[rw.fd] != rw {
		return false // the loop has it
	}
	p.forget(rw.fd)
	return true
}

// forget takes fd out of the watch; p.mu is held. The descriptor is still
// open (only the Response closes it, and only after the watch), so it
// cannot have been reused; or else Shutdown closed it, which took it out
// of the epoll set already, and nothing new is watched any more that could
// have been given its number.
func (p *epoller) forget(fd int32) {
	delete(p.conns, fd)
	unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
}

func (p *epoller) loop() {
	defer close(p.done)
	events := make([]unix.EpollEvent, 128)
	for {
		n, err := unix.EpollWait(p.epfd, events, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			p.failAll()
			return
		}
		for _, ev := range events[:n] {
			if ev.Fd == int32(p.wake) {
				p.failAll()
				return
			}
			p.mu.Lock()
			rw := p.conns[ev.Fd]
			if rw != nil {
				p.forget(ev.Fd)
			}
			p.mu.Unlock()
			if rw == nil {
				continue // stopped meanwhile
			}
			if t := rw.stopIdleTimer(); t != nil {
				t.Stop()
			}
			// A FIN (EPOLLRDHUP) with bytes still unread is a client that
			// sent its next request and half-closed at once: that request
			// is served, as net/http and readWatcher would, and the FIN
			// is the server's to read after it.
			gone := ev.Events&(unix.EPOLLHUP|unix.EPOLLERR) != 0 ||
				ev.Events&unix.EPOLLRDHUP != 0 && !unread(rw.c.Conn)
			go rw.event(nil, gone) // the handling may write and hand back: not on the loop
		}
	}
}

// unread reports whether bytes from the client wait to be read on c. It
// asks through c, which keeps the descriptor from being closed meanwhile.
func unread(c net.Conn) bool {
	sc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	sc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n > 0
}

// failAll ends every watch as the connection's end: the poller is going
// away (Shutdown) or broke.
func (p *epoller) failAll() {
	p.mu.Lock()
	var left []*Response
	for fd, rw := range p.conns {
		p.forget(fd)
		left = append(left, rw)
	}
	p.mu.Unlock()
	for _, rw := range left {
		if t := rw.stopIdleTimer(); t != nil {
			t.Stop()
		}
		go rw.event(nil, true)
	}
}

// alive reports whether the loop still runs; it ends only on Shutdown, or
// if epoll itself fails, and then new connections are watched otherwise.
func (p *epoller) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// close stops the loop and frees its descriptors; only the first call
// does anything.
func (p *epoller) close() {
	p.closeOnce.Do(func() {
		one := [8]byte{1}
		unix.Write(p.wake, one[:])
		<-p.done
		unix.Close(p.epfd)
		unix.Close(p.wake)
	})
}
