// Command sluice-release builds sluice's release files from this checkout:
//
//	go run ./cmd/sluice-release -out DIR
//
// writes, for linux and darwin on amd64 and arm64, the static binary
// DIR/sluice-VERSION-OS-ARCH (its version, commit and commit time stamped
// by the Go toolchain: `sluice version` prints them), a CycloneDX SBOM of
// the modules linked into each (DIR/sluice-VERSION-OS-ARCH.cdx.json, read
// from the binary's own build info, as `go version -m` shows it), and
// DIR/SHA256SUMS over all of them, for `sha256sum -c SHA256SUMS`. The
// binaries are built as the image's are (internal/gobuild): the same
// commit and Go toolchain give the same bytes, so anyone can rebuild a
// release and compare the sums.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/gobuild"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sluice-release:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("sluice-release", flag.ContinueOnError)
	out := fs.String("out", "", "directory to write the binaries, their SBOMs and SHA256SUMS to")
	plats := fs.String("platforms", "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64", "comma-separated GOOS/GOARCH pairs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() > 0 {
		return fmt.Errorf("usage: sluice-release -out DIR [-platforms linux/amd64,...]")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "sluice-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	var files []string
	var version string
	for _, p := range strings.Split(*plats, ",") {
		goos, goarch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok || (goos != "linux" && goos != "darwin") || (goarch != "amd64" && goarch != "arm64") {
			return fmt.Errorf("platform %q: want linux or darwin, amd64 or arm64", p)
		}
		tmp := filepath.Join(work, goos+"-"+goarch)
		if err := gobuild.Sluice(ctx, goos, goarch, tmp); err != nil {
			return err
		}
		st, err := gobuild.ReadStamp(tmp)
		if err != nil {
			return err
		}
		if version != "" && st.Version != version {
			return fmt.Errorf("%s built as %s, the others as %s: was the tree changed during the build?", p, st.Version, version)
		}
		version = st.Version
		name := fmt.Sprintf("sluice-%s-%s-%s", gobuild.TagSafe(st.Version), goos, goarch)
		exe, err := os.ReadFile(tmp)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(*out, name), exe, 0o755); err != nil {
			return err
		}
		sbom, err := cycloneDX(st, goos, goarch, exe)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(*out, name+".cdx.json"), sbom, 0o644); err != nil {
			return err
		}
		files = append(files, name, name+".cdx.json")
		fmt.Fprintf(stdout, "%s  (%d bytes)\n", filepath.Join(*out, name), len(exe))
	}
	sums, err := sha256sums(*out, files)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "SHA256SUMS"), sums, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\n", filepath.Join(*out, "SHA256SUMS"))
	return nil
}

// sha256sums is the SHA256SUMS file over names in dir, in sha256sum's
// format ("HEX  NAME"), sorted by name.
func sha256sums(dir string, names []string) ([]byte, error) {
	names = slices.Sorted(slices.Values(names))
	var b strings.Builder
	for _, n := range names {
		f, err := os.Open(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), n)
	}
	return []byte(b.String()), nil
}
