package regfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// within runs f and fails the test if it has not returned in 5 s: an open
// that waits for a named pipe's writer would otherwise hang the test.
func within(t *testing.T, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: still waiting after 5 s", what)
		return nil
	}
}

func TestRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "key.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	link := filepath.Join(dir, "link")
	os.Symlink(fifo, link)
	for _, tc := range []struct{ path, kind string }{
		{fifo, "a named pipe"},
		{link, "a named pipe"},
		{"/dev/null", "a character device"},
		{dir, "a directory"},
	} {
		err := within(t, tc.path, func() error { _, err := ReadFile(tc.path, 1<<10); return err })
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), tc.kind) || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("ReadFile(%s): %v; want ErrNotRegular naming the path and %q", tc.path, err, tc.kind)
		}
		// For writing too (RECORD_FILE), creating nothing.
		err = within(t, tc.path, func() error {
			f, err := OpenFile(tc.path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
			if err == nil {
				f.Close()
			}
			return err
		})
		if err == nil {
			t.Errorf("OpenFile(%s) for writing: opened", tc.path)
		}
	}
}

func TestReadsARegularFileThroughASymlink(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	os.WriteFile(file, []byte("sk-ant-xyz\n"), 0o600)
	link := filepath.Join(dir, "mounted")
	os.Symlink(file, link)
	b, err := ReadFile(link, 1<<10)
	if err != nil || string(b) != "sk-ant-xyz\n" {
		t.Fatalf("ReadFile through a symlink: %q, %v", b, err)
	}
	if _, err := ReadFile(file, 4); err == nil || !strings.Contains(err.Error(), "larger than 4 bytes") {
		t.Errorf("a file over the limit: %v", err)
	}
	if b, err := ReadFile(file, -1); err != nil || len(b) != 11 {
		t.Errorf("no limit: %q, %v", b, err)
	}
	created := filepath.Join(dir, "new")
	f, err := OpenFile(created, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatalf("OpenFile creating a file: %v", err)
	}
	f.Close()
	if _, err := os.Stat(created); err != nil {
		t.Error(err)
	}
}
