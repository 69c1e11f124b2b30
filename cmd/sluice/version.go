package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// writeVersion prints what `sluice version` and `sluice --version` print:
// the module version, the VCS revision and time the binary was built from,
// and the Go version, all from the build info the Go toolchain embeds, so
// that no build step has to stamp them in.
func writeVersion(w io.Writer) {
	info, ok := debug.ReadBuildInfo()
	io.WriteString(w, versionText(info, ok))
}

// versionText formats info (ok false: the binary has none). Each part
// that the build did not record says so: `go install ...@v1.2.3` records
// the module version but no VCS revision (it builds from the module
// cache), a build in a git checkout records the revision and
// "(devel)", and -buildvcs=false records no revision at all.
func versionText(info *debug.BuildInfo, ok bool) string {
	version, revision, at, goVersion := "unknown", "unknown", "unknown", runtime.Version()
	modified := false
	if ok && info != nil {
		if v := info.Main.Version; v != "" {
			version = v
		}
		if info.GoVersion != "" {
			goVersion = info.GoVersion
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if modified {
		revision += " (with uncommitted changes)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "sluice %s\n", version)
	fmt.Fprintf(&b, "  revision  %s\n", revision)
	fmt.Fprintf(&b, "  time      %s\n", at)
	fmt.Fprintf(&b, "  go        %s %s/%s\n", goVersion, runtime.GOOS, runtime.GOARCH)
	return b.String()
}
