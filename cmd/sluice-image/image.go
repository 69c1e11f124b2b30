package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"

	"github.com/sluicehq/sluice/internal/gobuild"
)

// What the image holds, and where. The user is a number, as Kubernetes'
// runAsNonRoot can only check a numeric user; 65532 is the "nonroot" of
// the distroless images, so volume permissions made for those fit.
const (
	binPath  = "/usr/local/bin/sluice"
	dataDir  = "/data"
	certPath = "/etc/ssl/certs/ca-certificates.crt"
	uid      = 65532
	port     = "8080"
	source   = "https://github.com/sluicehq/sluice"
)

// platform is one architecture of the image.
type platform struct{ OS, Arch, Variant string }

func (p platform) String() string { return p.OS + "/" + p.Arch }

func parsePlatforms(s string) ([]platform, error) {
	var out []platform
	for _, f := range strings.Split(s, ",") {
		os, arch, ok := strings.Cut(strings.TrimSpace(f), "/")
		if !ok || os != "linux" || (arch != "amd64" && arch != "arm64") {
			return nil, fmt.Errorf("platform %q: want linux/amd64 or linux/arm64", f)
		}
		p := platform{OS: os, Arch: arch}
		if arch == "arm64" {
			p.Variant = "v8" // what registries and engines match arm64 images by
		}
		out = append(out, p)
	}
	return out, nil
}

// built is one image build: the multi-arch index and each platform's image.
type built struct {
	index  v1.ImageIndex
	images []v1.Image // in the order of platforms
	plats  []platform
	stamp  gobuild.Stamp
}

// build compiles sluice for each platform in work and assembles the image
// index. Every byte of it follows from the commit and the toolchain: the
// binaries are built reproducibly (gobuild.Sluice), every timestamp (file
// times, the config's created, its history) is the commit's time, tar
// entries are written in a fixed order with fixed owners, and the CA
// certificates come from a Go module pinned in go.sum, not from the build
// machine.
func build(ctx context.Context, work string, plats []platform) (*built, error) {
	b := &built{plats: plats}
	for i, p := range plats {
		bin := filepath.Join(work, "sluice-"+p.OS+"-"+p.Arch)
		if err := gobuild.Sluice(ctx, p.OS, p.Arch, bin); err != nil {
			return nil, err
		}
		st, err := gobuild.ReadStamp(bin)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			b.stamp = st
		} else if st.Revision != b.stamp.Revision || st.Version != b.stamp.Version {
			return nil, fmt.Errorf("the %s binary is of %s %s, the %s one of %s %s: was the tree changed during the build?",
				p, st.Version, st.Revision, plats[0], b.stamp.Version, b.stamp.Revision)
		}
		img, err := platformImage(p, bin, st)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		b.images = append(b.images, img)
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for i, img := range b.images {
		p := plats[i]
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: p.OS, Architecture: p.Arch, Variant: p.Variant},
		}})
	}
	b.index = mutate.Annotations(idx, labels(b.stamp)).(v1.ImageIndex)
	return b, nil
}

// labels are the OCI annotations the config's labels and the index carry.
func labels(st gobuild.Stamp) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":         "sluice",
		"org.opencontainers.image.description":   "A proxy in front of the Anthropic API that windows, gates and paces requests",
		"org.opencontainers.image.version":       st.Version,
		"org.opencontainers.image.revision":      st.Revision,
		"org.opencontainers.image.created":       st.Time.UTC().Format(time.RFC3339),
		"org.opencontainers.image.source":        source,
		"org.opencontainers.image.url":           source,
		"org.opencontainers.image.documentation": source + "/blob/main/docs/deploy.md",
		"org.opencontainers.image.licenses":      "Apache-2.0",
	}
}

// platformImage is one architecture's image: the base layer, the binary's
// layer, and the config that runs `sluice serve` as the non-root user.
func platformImage(p platform, bin string, st gobuild.Stamp) (v1.Image, error) {
	base, err := baseLayer(st.Time)
	if err != nil {
		return nil, err
	}
	exe, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	app, err := layer(st.Time, []entry{
		{name: "usr/", dir: true, mode: 0o755},
		{name: "usr/local/", dir: true, mode: 0o755},
		{name: "usr/local/bin/", dir: true, mode: 0o755},
		{name: strings.TrimPrefix(binPath, "/"), mode: 0o755, body: exe},
	})
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: st.Time.UTC()}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{Created: created,
			CreatedBy: "sluice-image: /etc/passwd and /etc/group (user sluice, 65532), CA certificates, /data, /tmp"}},
		mutate.Addendum{Layer: app, MediaType: types.OCILayer, History: v1.History{Created: created,
			CreatedBy: "sluice-image: go build -trimpath -buildvcs=true -ldflags='-s -w' (CGO_ENABLED=0) " + gobuild.Package}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Arch, p.Variant
	cf.Created = created
	cf.Author = source
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", uid, uid),
		Entrypoint: []string{binPath, "serve"},
		// LISTEN_ADDR: inside a container loopback reaches nobody.
		// DATA_DIR: the volume. SSL_CERT_FILE: where Go looks first
		// anyway; said so that nobody has to guess.
		Env: []string{
			"PATH=/usr/local/bin",
			"LISTEN_ADDR=0.0.0.0:" + port,
			"DATA_DIR=" + dataDir,
			"SSL_CERT_FILE=" + certPath,
		},
		ExposedPorts: map[string]struct{}{port + "/tcp": {}},
		Volumes:      map[string]struct{}{dataDir: {}},
		WorkingDir:   dataDir,
		Labels:       labels(st),
		StopSignal:   "SIGTERM",
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels(st)).(v1.Image), nil
}

// baseLayer holds what every architecture shares: the users, the CA
// certificates and the directories sluice may write.
func baseLayer(at time.Time) (v1.Layer, error) {
	certs, err := caBundle()
	if err != nil {
		return nil, err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nsluice:x:%d:%d:sluice:%s:/sbin/nologin\n", uid, uid, dataDir)
	group := fmt.Sprintf("root:x:0:\nsluice:x:%d:\n", uid)
	return layer(at, []entry{
		{name: "data/", dir: true, mode: 0o750, uid: uid},
		{name: "etc/", dir: true, mode: 0o755},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: "etc/ssl/", dir: true, mode: 0o755},
		{name: "etc/ssl/certs/", dir: true, mode: 0o755},
		{name: strings.TrimPrefix(certPath, "/"), mode: 0o644, body: certs},
		{name: "tmp/", dir: true, mode: 0o1777},
	})
}

// caBundle is the CA certificates as PEM, from the Mozilla NSS trust store
// that golang.org/x/crypto/x509roots/fallback/bundle carries (its version
// pinned in go.mod, its hash in go.sum), so that the image does not take
// whatever the build machine has. A root the store trusts only with a
// constraint (distrust after a date) is left out: a PEM file cannot carry
// the constraint, and trusting it without one would be more than NSS does.
func caBundle() ([]byte, error) {
	var buf bytes.Buffer
	n := 0
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		if err := pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate}); err != nil {
			return nil, err
		}
		n++
	}
	if n < 50 {
		return nil, fmt.Errorf("the CA bundle holds %d unconstrained roots; expected over a hundred", n)
	}
	return buf.Bytes(), nil
}

// entry is one file or directory of a layer.
type entry struct {
	name string // relative, directories ending in "/"
	dir  bool
	mode int64
	uid  int
	body []byte
}

// layer writes entries as a tar in the order given, every entry with the
// time at, owner uid (group the same) and no user or group names, then
// gzips it (go-containerregistry's gzip is compress/gzip with no name and
// no time in its header, so the same tar gives the same blob).
func layer(at time.Time, entries []entry) (v1.Layer, error) {
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.name
	}
	if !slices.IsSorted(names) {
		return nil, fmt.Errorf("layer entries out of order: %v", names)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: at.UTC(), Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}
