// Command sluice is a proxy in front of the Anthropic API that groups
// requests arriving together into windows and releases them in waves under
// one concurrency cap, with a hard deadline on each.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
)

// command is one subcommand of sluice.
type command struct {
	summary string
	run     func(args []string) error
}

var commands = map[string]command{
	"bench":       {"send a scenario through the plain and the windowed path, compare them", runBench},
	"demo":        {"run the simulator, a windowed sluice in front, and built-in traffic", runDemo},
	"audit":       {"who changed which key or budget, when (the admin API)", runAudit},
	"budgets":     {"set, list and delete budgets live (the admin API)", runBudgets},
	"keys":        {"create, list, update, revoke sluice keys live (the admin API)", runKeys},
	"inbound-key": {"make a sluice key: the key, and its INBOUND_KEYS_FILE entry", runInboundKey},
	"serve":       {"run the proxy (settings from flags, environment and a config file)", runServe},
	"sim":         {"serve a simulated Anthropic API (tests, benchmarks, trying sluice)", runSim},
	"version":     {"print the version, VCS revision and Go version sluice was built with", nil}, // run answers it
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "sluice:", err)
			os.Exit(2)
		}
	}
}

// run runs the command args name; stdout takes the top-level help and the
// version.
func run(args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		return nil
	}
	switch args[0] {
	case "version", "--version", "-version":
		if len(args) > 1 {
			usage(os.Stderr)
			return fmt.Errorf("version takes no arguments: %q is not one (usage above)", args[1])
		}
		writeVersion(stdout)
		return nil
	}
	cmd, ok := commands[args[0]]
	if !ok {
		usage(os.Stderr)
		return fmt.Errorf("unknown command %q", args[0])
	}
	return cmd.run(args[1:])
}

// noArgs refuses the arguments left after fs's flags, which name, a
// command taking only flags, does not take: its usage goes to stderr and
// the error makes main exit 2. Ignoring them would let `podman run IMAGE
// version`, whose entrypoint is `sluice serve`, start a server unasked.
func noArgs(fs *flag.FlagSet, name string) error {
	if fs.NArg() == 0 {
		return nil
	}
	fs.SetOutput(os.Stderr)
	fs.Usage()
	return fmt.Errorf("%s takes no arguments, only flags: %q is not one (usage above)", name, fs.Arg(0))
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "sluice: a windowing, concurrency-capped proxy for the Anthropic API")
	fmt.Fprintln(w, "\nUsage: sluice COMMAND [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-8s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w, "\nRun 'sluice COMMAND --help' for a command's settings.")
}
