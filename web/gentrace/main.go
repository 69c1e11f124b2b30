// Command gentrace writes the replay trace that ships with the binary, so
// that the page's first Play needs no run: `go generate ./web`.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/sluicehq/sluice/web"
)

func main() {
	out := flag.String("out", "static/trace-default.json", "file to write")
	flag.Parse()
	tr, err := web.Run(context.Background(), web.DefaultParams)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gentrace:", err)
		os.Exit(1)
	}
	b, err := json.Marshal(tr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gentrace:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gentrace:", err)
		os.Exit(1)
	}
}
