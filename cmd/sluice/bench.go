package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
)

// benchPkg is the bench command's package: a binary of its own, so that
// this one, which serves, links no plotting library.
const benchPkg = "github.com/sluicehq/sluice/cmd/sluice-bench"

// sluiceExeEnv tells the bench this executable, the sluice that its
// --overhead measures (cmd/sluice-bench's SluiceExeEnv).
const sluiceExeEnv = "SLUICE_BENCH_SLUICE"

// runBench is `sluice bench ARGS`: it replaces this process with
// sluice-bench ARGS, found by benchCommand, so that the bench's output,
// exit code and signals are its own.
func runBench(args []string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	argv, err := benchCommand(self)
	if err != nil {
		return err
	}
	env := append(os.Environ(), sluiceExeEnv+"="+self)
	return syscall.Exec(argv[0], append(argv, args...), env)
}

// benchCommand is how to run the bench: sluice-bench beside this
// executable (both installed or built together); else, inside this
// module's source tree, `go run` of its sluice-bench (`go run ./cmd/sluice
// bench` runs the bench of the same tree); else sluice-bench on PATH; else
// `go run` of sluice-bench at this build's own module version.
func benchCommand(self string) ([]string, error) {
	if p := filepath.Join(filepath.Dir(self), "sluice-bench"); isExecutable(p) {
		return []string{p}, nil
	}
	goTool, goErr := exec.LookPath("go")
	if goErr == nil && inThisModule(goTool) {
		return []string{goTool, "run", benchPkg}, nil
	}
	if p, err := exec.LookPath("sluice-bench"); err == nil {
		return []string{p}, nil
	}
	if v := moduleVersion(); goErr == nil && v != "" {
		return []string{goTool, "run", benchPkg + "@" + v}, nil
	}
	return nil, errors.New("bench: the bench is the command sluice-bench, and there is none beside sluice or on PATH: " +
		"go install " + benchPkg + "@latest (or, in the source tree, go run ./cmd/sluice-bench)")
}

// inThisModule says whether the working directory is inside sluice's own
// module, where `go run` builds the bench from the same tree.
func inThisModule(goTool string) bool {
	out, err := exec.Command(goTool, "list", "-m").Output()
	return err == nil && strings.TrimSpace(string(out)) == "github.com/sluicehq/sluice"
}

// moduleVersion is the module version this binary was built at, when it
// names one the module proxy has (not a build of a modified tree).
func moduleVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok || bi.Main.Version == "" || bi.Main.Version == "(devel)" || strings.HasSuffix(bi.Main.Version, "+dirty") {
		return ""
	}
	return bi.Main.Version
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
