package bulk

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// The bulk store holds prompts in plain text (bulk.db-wal too, until a
// checkpoint): in a DATA_DIR that is already 0755, bulk.db and its -wal
// and -shm are made 0600, and a bulk.db left 0644 by an earlier sluice is
// made 0600 when it is opened.
func TestBulkStoreIsPrivate(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	for round := range 2 {
		s, err := OpenStore(context.Background(), "sqlite", dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"bulk.db", "bulk.db-wal", "bulk.db-shm"} {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("round %d: %s is %v; want 0600", round, name, fi.Mode().Perm())
			}
		}
		s.Close()
		os.Chmod(filepath.Join(dir, "bulk.db"), 0o644) // as an earlier sluice left it
	}
}
