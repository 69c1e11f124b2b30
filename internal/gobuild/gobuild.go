// Package gobuild builds the sluice command as the image (cmd/sluice-image)
// and the releases (cmd/sluice-release) ship it: static, from this
// checkout, the same bytes from the same commit wherever it is built.
package gobuild

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"time"
)

// Package is what is built: the sluice command.
const Package = "github.com/sluicehq/sluice/cmd/sluice"

// Sluice builds the sluice command for goos/goarch into out. The flags are
// what makes the build reproducible and self-describing:
//   - CGO_ENABLED=0: a static binary that needs no libc in the image and
//     no C toolchain for another architecture;
//   - -trimpath: no path of the build machine in the binary;
//   - -buildvcs=true: the Go toolchain stamps the commit, its time and
//     whether the tree was modified, and (Go 1.24 on) the module version
//     from the tag or a pseudo-version, which `sluice version` prints; a
//     build outside a git checkout fails rather than ship an unlabelled
//     binary;
//   - -ldflags=-s -w: no symbol table nor DWARF (stack traces keep their
//     function names and lines);
//   - GOAMD64, GOARM64 and GOFLAGS fixed, so that a builder's environment
//     cannot change the code generated.
func Sluice(ctx context.Context, goos, goarch, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=true", "-ldflags=-s -w", "-o", out, Package)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch,
		"GOAMD64=v1", "GOARM64=v8.0", "GOFLAGS=")
	defer lock()()
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for %s/%s: %v\n%s", Package, goos, goarch, err, b)
	}
	return nil
}

// Stamp is what a built binary says about itself.
type Stamp struct {
	Version  string    // the module version: a tag, or a pseudo-version (+dirty when modified)
	Revision string    // the commit
	Time     time.Time // the commit's time: every timestamp of the image is this one
	Modified bool      // built from a tree with uncommitted changes
	Info     *debug.BuildInfo
}

// ReadStamp reads the build info of the binary at path.
func ReadStamp(path string) (Stamp, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return Stamp{}, err
	}
	s := Stamp{Version: info.Main.Version, Info: info}
	for _, kv := range info.Settings {
		switch kv.Key {
		case "vcs.revision":
			s.Revision = kv.Value
		case "vcs.time":
			s.Time, err = time.Parse(time.RFC3339, kv.Value)
			if err != nil {
				return Stamp{}, fmt.Errorf("%s: vcs.time %q: %v", path, kv.Value, err)
			}
		case "vcs.modified":
			s.Modified = kv.Value == "true"
		}
	}
	if s.Revision == "" || s.Time.IsZero() || s.Version == "" || s.Version == "(devel)" {
		// The Go toolchain stamps only a checkout whose .git is a
		// directory: not a git worktree, whose .git is a file.
		return Stamp{}, fmt.Errorf("%s carries no VCS stamp (version %q, revision %q): build from a git clone (not a git worktree, which the Go toolchain does not stamp)", path, s.Version, s.Revision)
	}
	return s, nil
}

// TagSafe is v as an image tag or a file name may hold it: a "+" (of
// +dirty) becomes "-".
func TagSafe(v string) string { return strings.ReplaceAll(v, "+", "-") }
