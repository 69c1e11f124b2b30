package config

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Loading a configuration from flags and the environment, and writing the
// settings table for --help and docs/settings.md.

// Default returns the configuration with every setting at its default.
func Default() Config {
	c, err := Load(nil, func(string) (string, bool) { return "", false })
	if err != nil {
		panic("config: a default does not parse: " + err.Error()) // a bug in the table
	}
	return c
}

// RegisterFlags defines one string flag per setting on fs, and --config
// (ConfigFlag). The flags carry no defaults of their own, so Load can tell
// a flag that was given from one that was not.
func RegisterFlags(fs *flag.FlagSet) map[string]*string {
	vals := make(map[string]*string, len(Settings))
	for _, s := range Settings {
		vals[s.Flag] = fs.String(s.Flag, "", fmt.Sprintf("%s (env %s, default %s)", s.Meaning, s.Env, s.Default))
	}
	fs.String(ConfigFlag, "", "a TOML file of settings, keyed by their environment names")
	return vals
}

// Load builds a Config: for each setting the flag's value if fs was given
// that flag, else the environment's, else the value in the config file
// that fs's --config names, else the default. lookupEnv is os.LookupEnv in
// production. fs may be nil.
func Load(fs *flag.FlagSet, lookupEnv func(string) (string, bool)) (Config, error) {
	return LoadDefaults(fs, lookupEnv, nil)
}

// LoadDefaults is Load with defaults of the caller's own, by environment
// name, in place of the table's: the demo's BATCH_ENABLED is 1, and still
// loses to a file, the environment and a flag.
func LoadDefaults(fs *flag.FlagSet, lookupEnv func(string) (string, bool), defaults map[string]string) (Config, error) {
	given := map[string]string{}
	if fs != nil {
		fs.Visit(func(f *flag.Flag) { given[f.Name] = f.Value.String() })
	}
	var file map[string]fileValue
	var tables fileTables
	path, fromFile := given[ConfigFlag]
	if fromFile {
		var err error
		if file, tables, err = readFile(path); err != nil {
			return Config{}, err
		}
	}
	c := Config{Prices: tables.prices, Budgets: tables.budgets, Backends: tables.backends, OIDCGroups: tables.oidcGroups}
	for _, s := range Settings {
		v, src := s.Default, "default"
		if d, ok := defaults[s.Env]; ok {
			v = d
		}
		var bad error
		if fv, ok := file[s.Env]; ok {
			v, src, bad = fv.text, "config file "+path, fv.bad
		}
		if e, ok := lookupEnv(s.Env); ok && e != "" {
			v, src, bad = e, "environment", nil
		}
		if f, ok := given[s.Flag]; ok {
			v, src, bad = f, "flag --"+s.Flag, nil
		}
		err := bad
		if err == nil {
			err = s.apply(&c, strings.TrimSpace(v))
		}
		if err != nil {
			shown := strconv.Quote(redactURL(v))
			if s.secret {
				shown = "(not shown: it may hold a token)"
			}
			return Config{}, fmt.Errorf("invalid %s=%s (from %s): %v; accepted: %s", s.Env, shown, src, err, s.Accepts)
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// LoadEnv is Load with the process environment.
func LoadEnv(fs *flag.FlagSet) (Config, error) { return Load(fs, os.LookupEnv) }

// HelpWidth is the width --help fits in: a terminal's 80 columns.
const HelpWidth = 80

// WriteTable prints the settings for --help, one block each, to fit in
// HelpWidth columns: the variable, flag and default on one line, then the
// meaning and the accepted values wrapped and indented beneath.
func WriteTable(w io.Writer) {
	const indent = "    "
	for i, s := range Settings {
		if i > 0 {
			fmt.Fprintln(w)
		}
		def := s.Default
		if def == "" {
			def = "empty"
		}
		fmt.Fprintf(w, "%s  --%s  (default %s)\n", s.Env, s.Flag, def)
		io.WriteString(w, wrap(s.Meaning, indent, HelpWidth))
		io.WriteString(w, wrap("Accepts: "+s.Accepts+".", indent, HelpWidth))
	}
}

// wrap breaks text into lines of at most width columns, each starting
// with indent, at spaces (a word longer than a line gets a line of its
// own).
func wrap(text, indent string, width int) string {
	var b strings.Builder
	line := indent
	for _, word := range strings.Fields(text) {
		if line != indent && len(line)+1+len(word) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if line != indent {
			line += " "
		}
		line += word
	}
	if line != indent {
		b.WriteString(line + "\n")
	}
	return b.String()
}

// MarkdownTable renders the settings as the Markdown table of docs/settings.md.
func MarkdownTable() string {
	var b strings.Builder
	b.WriteString("| Variable | Flag | Default | Meaning |\n|---|---|---|---|\n")
	for _, s := range Settings {
		fmt.Fprintf(&b, "| `%s` | `--%s` | `%s` | %s |\n", s.Env, s.Flag, s.Default, s.Meaning)
	}
	return b.String()
}
