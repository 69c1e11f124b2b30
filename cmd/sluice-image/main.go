// Command sluice-image builds sluice's container image without a container
// engine: the static sluice binary for each architecture, CA
// certificates, a non-root user and `sluice serve` as the entrypoint,
// assembled with go-containerregistry into a multi-arch OCI image index.
//
//	go run ./cmd/sluice-image -out DIR
//
// writes DIR/oci, an OCI image layout holding the index (for skopeo,
// crane, oras or a registry), and DIR/sluice-linux-ARCH.tar, one archive
// per architecture for `docker load -i` or `podman load -i`. Building twice
// from one commit with one Go toolchain gives the same digests.
// docs/deploy.md says how to run it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/sluicehq/sluice/internal/gobuild"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sluice-image:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("sluice-image", flag.ContinueOnError)
	out := fs.String("out", "", "directory to write the OCI layout (DIR/oci) and the docker archives (DIR/sluice-linux-ARCH.tar) to")
	plats := fs.String("platforms", "linux/amd64,linux/arm64", "comma-separated platforms of the image index")
	repo := fs.String("repo", "sluice", "the repository the docker archives tag the image in (REPO:VERSION and REPO:latest)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() > 0 {
		return fmt.Errorf("usage: sluice-image -out DIR [-platforms linux/amd64,linux/arm64] [-repo sluice]")
	}
	ps, err := parsePlatforms(*plats)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "sluice-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	b, err := build(ctx, work, ps)
	if err != nil {
		return err
	}
	return write(b, *out, *repo, stdout)
}

// write puts the build in dir: the OCI layout and one docker archive per
// platform, replacing those of an earlier build.
func write(b *built, dir, repo string, stdout io.Writer) error {
	tag := gobuild.TagSafe(b.stamp.Version)
	ociDir := filepath.Join(dir, "oci")
	if err := os.RemoveAll(ociDir); err != nil {
		return err
	}
	lp, err := layout.Write(ociDir, empty.Index)
	if err != nil {
		return err
	}
	// The layout's index.json points at the image index, so that the
	// index keeps its own digest (the one a registry will show).
	if err := lp.AppendIndex(b.index, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag,
	})); err != nil {
		return err
	}
	d, err := b.index.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "sluice %s (revision %s, %s)\n", b.stamp.Version, b.stamp.Revision, b.stamp.Time.UTC().Format("2006-01-02T15:04:05Z"))
	fmt.Fprintf(stdout, "index        %s  %s (OCI layout, tag %s)\n", d, ociDir, tag)
	for i, img := range b.images {
		p := b.plats[i]
		path := filepath.Join(dir, archiveName(p))
		refs := map[name.Reference]v1.Image{}
		for _, t := range []string{tag, "latest"} {
			ref, err := name.NewTag(repo + ":" + t)
			if err != nil {
				return fmt.Errorf("-repo %q: %v", repo, err)
			}
			refs[ref] = img
		}
		if err := tarball.MultiRefWriteToFile(path, refs); err != nil {
			return err
		}
		md, err := img.Digest()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%-12s %s  %s (docker load -i; %s:%s)\n", p, md, path, repo, tag)
	}
	return nil
}

func archiveName(p platform) string { return "sluice-" + p.OS + "-" + p.Arch + ".tar" }
