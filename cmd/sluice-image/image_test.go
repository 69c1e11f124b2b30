package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"debug/elf"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if imageDir != "" {
		os.RemoveAll(imageDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	imageOnce sync.Once
	imageB    *built
	imageDir  string
	imageOut  string
	imageErr  error
)

// theImage is the image as `sluice-image -out DIR` writes it, for both
// platforms, built once for all the tests of this package (a cold build of
// two architectures is the package's cost in CI).
func theImage(t *testing.T) (*built, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: builds sluice for two architectures")
	}
	imageOnce.Do(func() {
		imageDir, imageErr = os.MkdirTemp("", "sluice-image-test-")
		if imageErr != nil {
			return
		}
		work := filepath.Join(imageDir, "work")
		if imageErr = os.Mkdir(work, 0o755); imageErr != nil {
			return
		}
		ps, _ := parsePlatforms("linux/amd64,linux/arm64")
		if imageB, imageErr = build(t.Context(), work, ps); imageErr != nil {
			return
		}
		var out bytes.Buffer
		imageErr = write(imageB, filepath.Join(imageDir, "out"), "sluice", &out)
		imageOut = out.String()
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return imageB, filepath.Join(imageDir, "out")
}

// Building again from the same commit gives the same index digest, so the
// same manifests, configs and layers. The Go build cache serves the second
// build's compiled packages; what this checks is what sluice-image adds
// (timestamps, file order and owners, gzip, the configs, the certificates)
// and the link, which runs again.
func TestImageIsReproducible(t *testing.T) {
	first, _ := theImage(t)
	work := t.TempDir()
	second, err := build(t.Context(), work, first.plats)
	if err != nil {
		t.Fatal(err)
	}
	d1, err := first.index.Digest()
	if err != nil {
		t.Fatal(err)
	}
	d2, err := second.index.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 {
		m1, _ := first.index.RawManifest()
		m2, _ := second.index.RawManifest()
		t.Fatalf("two builds of one commit: index %s, then %s\n%s\n%s", d1, d2, m1, m2)
	}
	t.Logf("index %s both times", d1)
}

func TestImageIndexHasBothArchitecturesAndTheLabels(t *testing.T) {
	b, out := theImage(t)
	im, err := b.index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var plats []string
	for _, m := range im.Manifests {
		if m.Platform == nil {
			t.Fatalf("manifest %s has no platform", m.Digest)
		}
		plats = append(plats, m.Platform.OS+"/"+m.Platform.Architecture)
		if m.MediaType != "application/vnd.oci.image.manifest.v1+json" {
			t.Errorf("%s: media type %s, want an OCI manifest", m.Digest, m.MediaType)
		}
	}
	if !slices.Equal(plats, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("platforms %v", plats)
	}
	rev, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.revision": strings.TrimSpace(string(rev)),
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.source":   "https://github.com/sluicehq/sluice",
		"org.opencontainers.image.version":  b.stamp.Version,
	} {
		if im.Annotations[k] != want {
			t.Errorf("index annotation %s=%q, want %q", k, im.Annotations[k], want)
		}
	}
	if !strings.HasPrefix(b.stamp.Version, "v") {
		t.Errorf("version %q: the toolchain stamped no module version", b.stamp.Version)
	}

	// The OCI layout on disk holds that index under its tag, and each
	// docker archive holds the same config and layers as the index's image.
	ociIdx, err := layout.ImageIndexFromPath(filepath.Join(out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	top, err := ociIdx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	d, _ := b.index.Digest()
	if len(top.Manifests) != 1 || top.Manifests[0].Digest != d ||
		top.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != strings.ReplaceAll(b.stamp.Version, "+", "-") {
		t.Errorf("the layout's index.json: %+v, want the index %s tagged with the version", top.Manifests, d)
	}
	if !strings.Contains(imageOut, d.String()) {
		t.Errorf("sluice-image printed no index digest:\n%s", imageOut)
	}
	for i, img := range b.images {
		arc, err := tarball.ImageFromPath(filepath.Join(out, archiveName(b.plats[i])), nil)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := img.ConfigName()
		got, err := arc.ConfigName()
		if err != nil || got != want {
			t.Errorf("%s archive: config %s (%v), want %s", b.plats[i], got, err, want)
		}
	}
}

// Each platform's image runs `sluice serve` as a numeric non-root user,
// with the port, the data volume and the labels, and holds a static
// binary of its own architecture, the users and the CA certificates.
func TestImageConfigAndFiles(t *testing.T) {
	b, _ := theImage(t)
	for i, img := range b.images {
		p := b.plats[i]
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cf.Config
		if cf.OS != p.OS || cf.Architecture != p.Arch {
			t.Errorf("%s: config says %s/%s", p, cf.OS, cf.Architecture)
		}
		if c.User != "65532:65532" {
			t.Errorf("%s: user %q, want 65532:65532 (numeric, non-root)", p, c.User)
		}
		if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/sluice", "serve"}) || len(c.Cmd) != 0 {
			t.Errorf("%s: entrypoint %q cmd %q", p, c.Entrypoint, c.Cmd)
		}
		if _, ok := c.ExposedPorts["8080/tcp"]; !ok || len(c.ExposedPorts) != 1 {
			t.Errorf("%s: exposed ports %v", p, c.ExposedPorts)
		}
		if _, ok := c.Volumes["/data"]; !ok {
			t.Errorf("%s: volumes %v, want /data", p, c.Volumes)
		}
		for _, e := range []string{"DATA_DIR=/data", "LISTEN_ADDR=0.0.0.0:8080"} {
			if !slices.Contains(c.Env, e) {
				t.Errorf("%s: env %q lacks %s", p, c.Env, e)
			}
		}
		for _, e := range c.Env {
			if k, _, _ := strings.Cut(e, "="); strings.Contains(k, "KEY") || strings.Contains(k, "SECRET") {
				t.Errorf("%s: the image sets %s: no secret belongs in an image", p, k)
			}
		}
		if c.Labels["org.opencontainers.image.version"] != b.stamp.Version {
			t.Errorf("%s: labels %v", p, c.Labels)
		}
		if cf.Created.Time != b.stamp.Time {
			t.Errorf("%s: created %v, want the commit's time %v", p, cf.Created.Time, b.stamp.Time)
		}

		files := readFiles(t, img)
		if !strings.Contains(string(files["etc/passwd"]), "sluice:x:65532:65532:") {
			t.Errorf("%s: /etc/passwd has no user 65532:\n%s", p, files["etc/passwd"])
		}
		pool, n := x509.NewCertPool(), 0
		for rest := files["etc/ssl/certs/ca-certificates.crt"]; ; {
			var blk *pem.Block
			if blk, rest = pem.Decode(rest); blk == nil {
				break
			}
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				t.Fatalf("%s: a CA certificate does not parse: %v", p, err)
			}
			pool.AddCert(c)
			n++
		}
		if n < 100 {
			t.Errorf("%s: %d CA certificates, want the NSS store's 100 and more", p, n)
		}
		exe, err := elf.NewFile(bytes.NewReader(files["usr/local/bin/sluice"]))
		if err != nil {
			t.Fatalf("%s: /usr/local/bin/sluice: %v", p, err)
		}
		wantMachine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[p.Arch]
		if exe.Machine != wantMachine {
			t.Errorf("%s: the binary is for %v", p, exe.Machine)
		}
		for _, prog := range exe.Progs {
			if prog.Type == elf.PT_INTERP {
				t.Errorf("%s: the binary has a dynamic loader: not static", p)
			}
		}
		if libs, _ := exe.ImportedLibraries(); len(libs) > 0 {
			t.Errorf("%s: the binary links %v", p, libs)
		}
	}
}

// readFiles reads an image's flattened file system: regular files by
// path, without the leading slash.
func readFiles(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[strings.TrimPrefix(h.Name, "/")] = b
		}
	}
}

// hostImage is the image of this machine's architecture.
func hostImage(t *testing.T) (v1.Image, platform, string) {
	t.Helper()
	b, out := theImage(t)
	for i, p := range b.plats {
		if p.Arch == runtime.GOARCH {
			return b.images[i], p, out
		}
	}
	t.Skipf("the image has no %s variant to run here", runtime.GOARCH)
	return nil, platform{}, ""
}
