// Command gentrace writes the replay traces that ship with the binary, so
// that the page replays without a run: `go generate ./web`. It writes the
// page's own burst (benchtrace.Run of web.DefaultParams) to -out, and, into
// -traces, one file per scenario of the bench suite, each run as
// bench.RunSuite runs it (one seed, the scenario's modes and its
// companion), with the suite's verdict line. The runs are real time, one
// after the other, as figures meant for reading must be: about as long as
// `sluice bench --suite` (12-13 minutes on two cores).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/web"
	"github.com/sluicehq/sluice/web/benchtrace"
)

func main() {
	out := flag.String("out", "static/trace-default.json", "file to write the page's own burst to")
	dir := flag.String("traces", "static/traces", "directory to write one trace per suite scenario into")
	only := flag.String("only", "", "comma-separated names to regenerate (suite scenarios, or "+web.PageBurst+"); empty: all")
	flag.Parse()
	if err := run(*out, *dir, *only); err != nil {
		fmt.Fprintln(os.Stderr, "gentrace:", err)
		os.Exit(1)
	}
}

func run(out, dir, only string) error {
	ctx := context.Background()
	names := append(bench.SuiteScenarios(), web.PageBurst)
	if only != "" {
		want := strings.Split(only, ",")
		for _, n := range want {
			if !slices.Contains(names, n) {
				return fmt.Errorf("-only: %q is not one of %s", n, strings.Join(names, ", "))
			}
		}
		names = slices.DeleteFunc(names, func(n string) bool { return !slices.Contains(want, n) })
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	began := time.Now()
	for _, name := range names {
		start := time.Now()
		var v any
		path := filepath.Join(dir, name+".json")
		if name == web.PageBurst {
			tr, err := benchtrace.Run(ctx, web.DefaultParams)
			if err != nil {
				return err
			}
			v, path = tr, out
		} else {
			tr, err := suiteTrace(ctx, name)
			if err != nil {
				return err
			}
			v = tr
		}
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if len(b) > web.TraceBudget {
			return fmt.Errorf("%s: %d bytes, over the budget of %d", name, len(b), web.TraceBudget)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "gentrace: %s: %s, %d KB, %.0f s\n", name, path, (len(b)+1023)/1024, time.Since(start).Seconds())
	}
	fmt.Fprintf(os.Stderr, "gentrace: %d traces in %.0f s\n", len(names), time.Since(began).Seconds())
	return nil
}

// suiteTrace runs one scenario as the suite does and traces it.
func suiteTrace(ctx context.Context, name string) (*web.ScenarioTrace, error) {
	sc, err := bench.LoadScenario(name)
	if err != nil {
		return nil, err
	}
	s, err := bench.RunSuite(ctx, bench.SuiteOptions{Scenarios: []string{name}, Command: "go generate ./web"})
	if err != nil {
		return nil, err
	}
	return benchtrace.SuiteTrace(s.Entries[0], sc)
}
