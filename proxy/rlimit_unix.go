//go:build unix

package proxy

import "syscall"

// fileLimit is the process's soft limit on open files (which Go raises to
// the hard limit at start), or 0 if unknown or unlimited.
func fileLimit() uint64 {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) != nil || rl.Cur == ^uint64(0) {
		return 0
	}
	return rl.Cur
}
