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
