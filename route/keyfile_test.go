package route

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKeyFileNotARegularFile: a key file that is a directory, a device or
// a FIFO is refused at once with a message that says so; a FIFO nobody
// writes to must not hold sluice's start for ever.
func TestKeyFileNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	for _, path := range []string{dir, "/dev/zero", fifo} {
		done := make(chan error, 1)
		go func() {
			_, err := readKey("file:"+path, nil)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("%s: %v; want it refused as not a regular file", path, err)
			}
		case <-time.After(5 * time.Second):
			// Unblock the reader, so that the test ends.
			if w, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
				w.Write([]byte("sk-x\n"))
				w.Close()
			}
			<-done
			t.Errorf("%s: reading the key file hung", path)
		}
	}
}
