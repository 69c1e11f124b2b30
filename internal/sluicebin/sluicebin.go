// Package sluicebin builds the sluice command once per test binary, for
// the tests that run it as a real process (killed with SIGKILL, run as
// replicas, measured from outside), and runs it as a replica of a gate
// shared through Redis (StartReplica).
package sluicebin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	once sync.Once
	path string
	err  error
)

// Path is the path of a sluice binary built from this tree with go build,
// with sluice-bench beside it (so that `sluice bench` runs the bench of
// the same tree); the first call builds them, and a failed build fails
// every caller's test.
func Path(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		dir, mkErr := os.MkdirTemp("", "sluice-bin-")
		if mkErr != nil {
			err = mkErr
			return
		}
		path = filepath.Join(dir, "sluice")
		out, buildErr := exec.Command("go", "build", "-o", dir, "github.com/sluicehq/sluice/cmd/sluice", "github.com/sluicehq/sluice/cmd/sluice-bench").CombinedOutput()
		if buildErr != nil {
			err = fmt.Errorf("go build: %v\n%s", buildErr, out)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return path
}
