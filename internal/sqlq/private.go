package sqlq

import (
	"fmt"
	"os"
)

// PrivateFile readies the SQLite database at path to be the operator's
// alone before SQLite opens it: a new one is made empty with mode 0600
// (SQLite's unix VFS would make it 0644, whatever DATA_DIR's mode), and
// one that exists, with its -wal and -shm, loses any group or other
// access an earlier sluice left. SQLite makes a -wal and -shm with the
// database file's own mode, so these are 0600 too from then on.
func PrivateFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			continue // no -wal or -shm yet
		}
		if fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(p, fi.Mode().Perm()&0o700); err != nil {
				return fmt.Errorf("make %s private: %w", p, err)
			}
		}
	}
	return nil
}
