package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"strings"
	"time"
)

// The admin verbs: sluice keys, sluice budgets and sluice audit ask a
// running sluice's admin API (docs/admin-api.md), so that an operator
// changes keys and budgets without writing curl. The admin key is read
// from ADMIN_KEY or --admin-key-file and never printed.

func runKeys(args []string) error    { return adminVerb("keys", args, os.Stdout) }
func runBudgets(args []string) error { return adminVerb("budgets", args, os.Stdout) }
func runAudit(args []string) error   { return adminVerb("audit", args, os.Stdout) }

const adminUsage = `Usage:
  sluice keys create NAME [--tenant T] [--class C] [--weight W] [--max-concurrent N]
                          [--max-waiting N] [--models a,b*] [--backends x,y]
  sluice keys list
  sluice keys update NAME [the create flags to change]
  sluice keys revoke NAME
  sluice budgets set NAME (--key KEY | --tenant T | --group G) (--usd N | --tokens N)
                          --period day|week|month [--time-zone Z] [--warn-at N]
  sluice budgets list
  sluice budgets delete NAME
  sluice audit [--limit N]

Asks a running sluice's admin API (INBOUND_KEYS_STORE=1, ADMIN_KEY set).
Every verb takes:
  --admin-url URL       the admin listener (env SLUICE_ADMIN_URL; default
                        http://127.0.0.1:9091)
  --admin-key-file F    a file holding ADMIN_KEY (default: the environment's)
  --as NAME             who the audit says made the change (default: $USER)
`

// adminClient is one verb's way to the admin API.
type adminClient struct {
	base, key, actor string
	http             *http.Client
}

// adminVerb runs `sluice group verb args...`.
func adminVerb(group string, args []string, out io.Writer) error {
	verb := ""
	if group == "audit" {
		verb = "audit"
	} else if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		verb, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet(group+" "+verb, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	base := fs.String("admin-url", envOr("SLUICE_ADMIN_URL", "http://127.0.0.1:9091"), "")
	keyFile := fs.String("admin-key-file", "", "")
	as := fs.String("as", "", "")
	tenant := fs.String("tenant", "", "")
	// Read through fs.Lookup (keyBody): only those given are sent.
	fs.String("class", "", "")
	fs.Float64("weight", 0, "")
	fs.Int("max-concurrent", 0, "")
	fs.Int("max-waiting", 0, "")
	models := fs.String("models", "", "")
	backends := fs.String("backends", "", "")
	key := fs.String("key", "", "")
	idpGroup := fs.String("group", "", "") // each member of the identity provider's group on their own
	usd := fs.Float64("usd", 0, "")
	tokens := fs.Int64("tokens", 0, "")
	period := fs.String("period", "", "")
	zone := fs.String("time-zone", "", "")
	warnAt := fs.Float64("warn-at", 0, "")
	limit := fs.Int("limit", 50, "")
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) || verb == "help" {
		fmt.Fprint(out, adminUsage)
		return nil
	} else if err != nil {
		return fmt.Errorf("%s %s: %w (sluice %s --help)", group, verb, err, group)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s %s: %q is one argument too many (sluice %s --help)", group, verb, fs.Arg(0), group)
	}
	c, err := newAdminClient(*base, *keyFile, *as)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	needName := func() error {
		if name == "" {
			return fmt.Errorf("%s %s needs a NAME (sluice %s --help)", group, verb, group)
		}
		return nil
	}
	keyBody := func() map[string]any {
		b := map[string]any{}
		for flagName, field := range map[string]string{"tenant": "tenant", "class": "class", "weight": "weight", "max-concurrent": "max_concurrent", "max-waiting": "max_waiting"} {
			if set[flagName] {
				b[field] = fs.Lookup(flagName).Value.(flag.Getter).Get()
			}
		}
		if set["models"] {
			b["models"] = splitList(*models)
		}
		if set["backends"] {
			b["backends"] = splitList(*backends)
		}
		return b
	}
	switch group + " " + verb {
	case "keys create":
		if err := needName(); err != nil {
			return err
		}
		b := keyBody()
		b["name"] = name
		var created struct {
			Key  string          `json:"key"`
			Rec  json.RawMessage `json:"record"`
			Note string          `json:"note"`
		}
		if err := c.do(http.MethodPost, "/admin/keys", b, &created); err != nil {
			return err
		}
		fmt.Fprintf(out, "key:    %s\nrecord: %s\n(%s)\n", created.Key, created.Rec, created.Note)
		return nil
	case "keys update":
		if err := needName(); err != nil {
			return err
		}
		return c.print(out, http.MethodPatch, "/admin/keys/"+url.PathEscape(name), keyBody())
	case "keys list":
		return c.print(out, http.MethodGet, "/admin/keys", nil)
	case "keys revoke":
		if err := needName(); err != nil {
			return err
		}
		return c.print(out, http.MethodDelete, "/admin/keys/"+url.PathEscape(name), nil)
	case "budgets set":
		if err := needName(); err != nil {
			return err
		}
		b := map[string]any{"period": *period}
		switch {
		case countSet(set, "key", "tenant", "group") != 1:
			return errors.New("budgets set: give one of --key (a sluice key's name or short hash), --tenant and --group (an identity provider's group: each member bound on their own)")
		case set["key"]:
			b["scope"], b["target"] = "key", *key
		case set["group"]:
			b["scope"], b["target"] = "group", *idpGroup
		default:
			b["scope"], b["target"] = "tenant", *tenant
		}
		if set["usd"] {
			b["usd"] = *usd
		}
		if set["tokens"] {
			b["tokens"] = *tokens
		}
		if set["time-zone"] {
			b["time_zone"] = *zone
		}
		if set["warn-at"] {
			b["warn_at"] = *warnAt
		}
		return c.print(out, http.MethodPut, "/admin/budgets/"+url.PathEscape(name), b)
	case "budgets list":
		return c.print(out, http.MethodGet, "/admin/budgets", nil)
	case "budgets delete":
		if err := needName(); err != nil {
			return err
		}
		if err := c.do(http.MethodDelete, "/admin/budgets/"+url.PathEscape(name), nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(out, "budget %q deleted\n", name)
		return nil
	case "audit audit":
		if name != "" {
			return fmt.Errorf("audit takes no NAME: %q (sluice audit --help)", name)
		}
		return c.print(out, http.MethodGet, fmt.Sprintf("/admin/audit?limit=%d", *limit), nil)
	}
	fmt.Fprint(os.Stderr, adminUsage)
	return fmt.Errorf("%s: unknown verb %q (usage above)", group, verb)
}

// countSet is how many of names were given.
func countSet(set map[string]bool, names ...string) int {
	n := 0
	for _, f := range names {
		if set[f] {
			n++
		}
	}
	return n
}

func newAdminClient(base, keyFile, as string) (*adminClient, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--admin-url %q: want the admin listener's http:// or https:// URL", base)
	}
	key := os.Getenv("ADMIN_KEY")
	if keyFile != "" {
		b, err := os.ReadFile(keyFile)
		if err != nil {
			return nil, fmt.Errorf("--admin-key-file: %w", err)
		}
		key = strings.TrimSpace(string(b))
	}
	if key == "" {
		return nil, errors.New("no admin key: set ADMIN_KEY, or --admin-key-file to a file holding it")
	}
	if as == "" {
		if me, err := user.Current(); err == nil {
			as = me.Username
		}
	}
	return &adminClient{base: strings.TrimSuffix(base, "/"), key: key, actor: as, http: &http.Client{Timeout: 30 * time.Second}}, nil
}

// do sends body (nil: none) as JSON and decodes the answer into into (nil:
// discarded); an error answer's message is the error.
func (c *adminClient) do(method, path string, body, into any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("X-Api-Key", c.key)
	req.Header.Set("Content-Type", "application/json")
	if c.actor != "" {
		req.Header.Set("X-Sluice-Actor", c.actor)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// The URL holds no key; the error names the admin URL only.
		return fmt.Errorf("the admin API at %s: %w", c.base, errors.Unwrap(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct{ Type, Message string } `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
			return fmt.Errorf("%s %s: %d %s: %s", method, path, resp.StatusCode, e.Error.Type, e.Error.Message)
		}
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if into != nil {
		return json.Unmarshal(b, into)
	}
	return nil
}

// print does the call and prints its answer as indented JSON.
func (c *adminClient) print(out io.Writer, method, path string, body any) error {
	var v json.RawMessage
	if err := c.do(method, path, body, &v); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, v, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err := out.Write(buf.Bytes())
	return err
}

func splitList(s string) []string {
	out := []string{}
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
