package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"runtime/debug"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/gobuild"
)

// The CycloneDX 1.5 JSON this writes: the small part of the schema an
// SBOM of a Go binary needs, written by hand rather than through a
// framework. https://cyclonedx.org/docs/1.5/json/
type (
	bom struct {
		BOMFormat    string       `json:"bomFormat"`
		SpecVersion  string       `json:"specVersion"`
		SerialNumber string       `json:"serialNumber"`
		Version      int          `json:"version"`
		Metadata     metadata     `json:"metadata"`
		Components   []component  `json:"components"`
		Dependencies []dependency `json:"dependencies"`
	}
	metadata struct {
		Timestamp string    `json:"timestamp"`
		Tools     tools     `json:"tools"`
		Component component `json:"component"`
	}
	tools struct {
		Components []component `json:"components"`
	}
	component struct {
		Type       string     `json:"type"`
		BOMRef     string     `json:"bom-ref,omitempty"`
		Name       string     `json:"name"`
		Version    string     `json:"version,omitempty"`
		PURL       string     `json:"purl,omitempty"`
		Hashes     []hash     `json:"hashes,omitempty"`
		Properties []property `json:"properties,omitempty"`
	}
	hash struct {
		Alg     string `json:"alg"`
		Content string `json:"content"`
	}
	property struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	}
	dependency struct {
		Ref       string   `json:"ref"`
		DependsOn []string `json:"dependsOn"`
	}
)

// purl is a Go module's package URL (pkg:golang/PATH@VERSION), with the
// platform for the main module's binary.
func purl(path, version string, qualifiers ...string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	p := "pkg:golang/" + strings.Join(segs, "/") + "@" + url.PathEscape(version)
	if len(qualifiers) > 0 {
		p += "?" + strings.Join(qualifiers, "&")
	}
	return p
}

// cycloneDX describes the binary exe: sluice itself (with the binary's
// SHA-256, the commit and the build settings), the Go standard library of
// its toolchain, and each module linked in, as the build info records it
// (a replaced module by its replacement). Everything in it follows from
// the binary, so rebuilding gives the same SBOM.
func cycloneDX(st gobuild.Stamp, goos, goarch string, exe []byte) ([]byte, error) {
	info := st.Info
	sum := sha256.Sum256(exe)
	main := component{
		Type: "application", Name: info.Main.Path, Version: st.Version,
		PURL:   purl(info.Main.Path, st.Version, "goos="+goos, "goarch="+goarch),
		Hashes: []hash{{Alg: "SHA-256", Content: hex.EncodeToString(sum[:])}},
	}
	main.BOMRef = main.PURL
	for _, s := range info.Settings {
		main.Properties = append(main.Properties, property{Name: "go.build." + s.Key, Value: s.Value})
	}
	goVersion := strings.TrimPrefix(info.GoVersion, "go")
	stdlib := component{Type: "library", Name: "stdlib", Version: info.GoVersion, PURL: purl("stdlib", goVersion)}
	stdlib.BOMRef = stdlib.PURL
	comps := []component{stdlib}
	deps := dependency{Ref: main.BOMRef, DependsOn: []string{stdlib.BOMRef}}
	for _, m := range info.Deps {
		c := module(m)
		comps = append(comps, c)
		deps.DependsOn = append(deps.DependsOn, c.BOMRef)
	}
	// A serial number that is the same for the same binary: a UUID made
	// from its hash (version 4's layout, as the schema's pattern asks).
	u := sha256.Sum256(append([]byte("sluice-release sbom "), sum[:]...))
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	serial := fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	b := bom{
		BOMFormat: "CycloneDX", SpecVersion: "1.5", SerialNumber: serial, Version: 1,
		Metadata: metadata{
			Timestamp: st.Time.UTC().Format(time.RFC3339),
			Tools:     tools{Components: []component{{Type: "application", Name: "sluice-release"}}},
			Component: main,
		},
		Components:   comps,
		Dependencies: []dependency{deps},
	}
	out, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

func module(m *debug.Module) component {
	path, version, sum := m.Path, m.Version, m.Sum
	var props []property
	if m.Replace != nil {
		props = append(props, property{Name: "go.module.replaces", Value: m.Path + "@" + m.Version})
		path, version, sum = m.Replace.Path, m.Replace.Version, m.Replace.Sum
	}
	if sum != "" {
		// go.sum's hash of the module's files (a dirhash, not a plain
		// SHA-256 of one artifact): a property, not a CycloneDX hash.
		props = append(props, property{Name: "go.module.sum", Value: sum})
	}
	c := component{Type: "library", Name: path, Version: version, PURL: purl(path, version), Properties: props}
	c.BOMRef = c.PURL
	return c
}
