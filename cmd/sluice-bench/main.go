// Command sluice-bench is `sluice bench`: it sends a scenario's workload
// through the plain and the windowed path against the simulator and
// compares them (--suite, --replay), or measures what sluice adds to a
// call (--overhead), and draws the charts. It is a binary of its own so
// that the serving binary, sluice, links no plotting library; `sluice
// bench` finds this command and runs it (cmd/sluice/bench.go), and `go run
// ./cmd/sluice-bench` runs it straight.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/sluicehq/sluice/bench/overhead"
)

func main() {
	if child, err := overhead.RunChild(os.Stdout); child { // one of --overhead's own processes
		if err != nil {
			fmt.Fprintln(os.Stderr, "sluice bench:", err)
			os.Exit(2)
		}
		return
	}
	if err := runBench(os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "sluice bench:", err)
			os.Exit(2)
		}
	}
}

// noArgs refuses the arguments left after fs's flags: the bench takes
// only flags, and its usage goes to stderr with the error.
func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() == 0 {
		return nil
	}
	fs.SetOutput(os.Stderr)
	fs.Usage()
	return fmt.Errorf("bench takes no arguments, only flags: %q is not one (usage above)", fs.Arg(0))
}
