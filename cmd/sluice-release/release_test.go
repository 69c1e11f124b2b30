package main

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The release of this machine's platform alone (the four are built the
// same way; building them all would cost CI minutes for no more proof):
// the binary prints the stamped version and commit, SHA256SUMS matches
// the files, and the SBOM lists every module the binary links.
func TestReleaseBinarySumsAndSBOM(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds sluice")
	}
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skipf("no release for %s", runtime.GOOS)
	}
	dir := t.TempDir()
	var out bytes.Buffer
	if err := run([]string{"-out", dir, "-platforms", runtime.GOOS + "/" + runtime.GOARCH}, &out); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var bin string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "sluice-v") && strings.HasSuffix(e.Name(), "-"+runtime.GOOS+"-"+runtime.GOARCH) {
			bin = filepath.Join(dir, e.Name())
		}
	}
	if bin == "" || len(entries) != 3 {
		t.Fatalf("wrote %v, want the binary, its SBOM and SHA256SUMS", entries)
	}

	rev, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	v, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sluice " + info.Main.Version + "\n", "revision  " + strings.TrimSpace(string(rev))} {
		if !strings.Contains(string(v), want) {
			t.Errorf("sluice version printed no %q:\n%s", want, v)
		}
	}
	if !strings.Contains(filepath.Base(bin), strings.ReplaceAll(info.Main.Version, "+", "-")) {
		t.Errorf("%s is not named for its version %s", bin, info.Main.Version)
	}

	// `sha256sum -c SHA256SUMS`, done here.
	sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(sums)), "\n")
	if len(lines) != 2 {
		t.Fatalf("SHA256SUMS:\n%s", sums)
	}
	for _, l := range lines {
		sum, name, ok := strings.Cut(l, "  ")
		b, err := os.ReadFile(filepath.Join(dir, name))
		if !ok || err != nil {
			t.Fatalf("SHA256SUMS line %q: %v", l, err)
		}
		if h := sha256.Sum256(b); hex.EncodeToString(h[:]) != sum {
			t.Errorf("%s: SHA256SUMS says %s", name, sum)
		}
	}

	var sbom struct {
		BOMFormat, SpecVersion, SerialNumber string
		Metadata                             struct {
			Component struct {
				Name, Version, PURL string
				Hashes              []struct{ Alg, Content string }
			}
		}
		Components []struct{ Name, Version, PURL string }
	}
	b, err := os.ReadFile(bin + ".cdx.json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&sbom); err != nil {
		t.Fatal(err)
	}
	if sbom.BOMFormat != "CycloneDX" || sbom.SpecVersion != "1.5" || !strings.HasPrefix(sbom.SerialNumber, "urn:uuid:") {
		t.Errorf("SBOM header: %s %s %s", sbom.BOMFormat, sbom.SpecVersion, sbom.SerialNumber)
	}
	exe, _ := os.ReadFile(bin)
	h := sha256.Sum256(exe)
	mc := sbom.Metadata.Component
	if mc.Name != "github.com/sluicehq/sluice" || mc.Version != info.Main.Version || len(mc.Hashes) != 1 || mc.Hashes[0].Content != hex.EncodeToString(h[:]) {
		t.Errorf("SBOM's component: %+v", mc)
	}
	listed := map[string]string{}
	for _, c := range sbom.Components {
		listed[c.Name] = c.Version
		if !strings.HasPrefix(c.PURL, "pkg:golang/") {
			t.Errorf("component %s: purl %q", c.Name, c.PURL)
		}
	}
	if len(info.Deps) < 20 {
		t.Fatalf("the binary records %d modules; it links more", len(info.Deps))
	}
	for _, m := range info.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		if listed[m.Path] != m.Version {
			t.Errorf("the SBOM lists %s at %q, the binary links %s", m.Path, listed[m.Path], m.Version)
		}
	}
	if listed["stdlib"] != info.GoVersion {
		t.Errorf("the SBOM's stdlib is %q, the binary's Go %s", listed["stdlib"], info.GoVersion)
	}
}
