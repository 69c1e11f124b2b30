package docs

import (
	"os/exec"
	"strings"
	"testing"
)

// deps is `go list -deps pkg`: every package pkg links, its own included.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// The dependencies point the way architecture.md says: window and gate
// import nothing of the project, request not the gate, proxy not the
// package that wires it, and the serving binary no plotting library.
func TestDependenciesPointOneWay(t *testing.T) {
	const mod = "github.com/sluicehq/sluice/"
	for _, c := range []struct {
		pkg, forbidden, why string
	}{
		{"window", mod, "window imports nothing of the project"},
		{"gate", mod, "gate imports nothing of the project"},
		{"request", mod + "gate", "request owns its Class"},
		{"dispatch", mod + "dispatch/", "dispatch knows its policies only by their seams; they import it"},
		{"proxy", mod + "assemble", "proxy takes parts.Parts, not the package that builds them"},
		{"cmd/sluice", "gonum.org/", "the serving binary links no plotting library (bench/plots is cmd/sluice-bench's)"},
		{"cmd/sluice", mod + "bench/plots", "the charts are cmd/sluice-bench's"},
	} {
		for _, d := range deps(t, "github.com/sluicehq/sluice/"+c.pkg) {
			if d != mod+c.pkg && strings.HasPrefix(d, c.forbidden) {
				t.Errorf("%s links %s: %s", c.pkg, d, c.why)
			}
		}
	}
}
