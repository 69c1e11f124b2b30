package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sluicehq/sluice/proxy"
)

func runInboundKey(args []string) error { return inboundKey(args, os.Stdout) }

// inboundKey makes a new sluice key for the keys file: it prints the key,
// to give to its holder once, and its keys file entry, which holds only
// the key's SHA-256.
func inboundKey(args []string, out io.Writer) error {
	if len(args) != 1 || args[0] == "" || args[0][0] == '-' {
		help := len(args) == 1 && (args[0] == "-h" || args[0] == "--help")
		w := out
		if !help {
			w = os.Stderr // an error's usage goes with the error
		}
		fmt.Fprint(w, "Usage: sluice inbound-key NAME\n\n"+
			"Makes a new sluice key for INBOUND_KEYS_FILE: prints the key (give it to its\n"+
			"holder; sluice keeps only its hash) and the entry to add to the file's \"keys\"\n"+
			"list, where tenant, weight, class, max_concurrent, max_waiting and models may\n"+
			"be added. Then send sluice SIGHUP.\n")
		if help {
			return nil
		}
		if len(args) > 1 {
			return fmt.Errorf("inbound-key takes one argument, the key's name: %q is one too many (usage above)", args[1])
		}
		return errors.New("inbound-key takes one argument: the key's name")
	}
	key, sum := proxy.NewKey()
	entry, _ := json.Marshal(struct {
		Name   string `json:"name"`
		SHA256 string `json:"sha256"`
	}{args[0], sum})
	fmt.Fprintf(out, "key:   %s\nentry: %s\n", key, entry)
	return nil
}
