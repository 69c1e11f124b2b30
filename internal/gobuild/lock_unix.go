//go:build unix

package gobuild

import (
	"os"
	"path/filepath"
	"syscall"
)

// lock serializes this package's builds across processes: `go test ./...`
// runs the image's and the release's tests at once, and two go builds of
// the same packages at once compile everything twice (the build cache
// only helps the one that starts after the other has finished).
func lock() (unlock func()) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "sluice-gobuild.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return func() {}
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return func() {}
	}
	return func() { f.Close() } // closing the file releases the lock
}
