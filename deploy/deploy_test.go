package deploy

import (
	"os"
	"os/exec"
	"testing"
)

// tool finds a command the test needs. In CI (.ci/run installs it) a
// missing tool fails the test; elsewhere the test skips, saying how to get
// it, so `go test ./...` works on a machine without it.
func tool(t *testing.T, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not installed (%s): %v", name, install, err)
	}
	t.Skipf("%s is not installed; %s to run this test", name, install)
	return ""
}
