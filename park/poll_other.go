//go:build !linux

package park

import "time"

// epoller is Linux's; elsewhere every parked connection is watched by a
// goroutine (readWatcher).
type epoller struct{}

func newPoller() *epoller                      { return nil }
func (*epoller) watch(*Response)               {}
func (*epoller) idle(*Response, time.Duration) {}
func (*epoller) stop(*Response) bool           { return false }
func (*epoller) close()                        {}
func (*epoller) alive() bool                   { return false }

// WriteNow is Linux's (see writenow_linux.go); elsewhere it never writes,
// and the caller writes with Write and Flush.
func (rw *Response) WriteNow(p []byte) bool { return false }

// Owes is how many bytes WriteNow left to send: none, here.
func (rw *Response) Owes() int { return 0 }

// nowWrite is Linux's WriteNow system call; nothing here.
type nowWrite struct{}
