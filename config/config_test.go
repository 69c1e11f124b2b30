package config

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestDefaultsAreTheSeeds(t *testing.T) {
	c := Default()
	if c.Enabled || c.MaxSize != 16 || c.MaxWait != 20*time.Millisecond || c.MaxConcurrency != 8 ||
		c.Timeout != 60*time.Second || c.ListenAddr != "127.0.0.1:8080" ||
		c.UpstreamURL.String() != "https://api.anthropic.com" || c.StreamIdleTimeout != 60*time.Second {
		t.Fatalf("defaults = %+v", c)
	}
}

func TestFlagBeatsEnvBeatsDefault(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	RegisterFlags(fs)
	if err := fs.Parse([]string{"--batch-max-size", "4"}); err != nil {
		t.Fatal(err)
	}
	c, err := Load(fs, env(map[string]string{"BATCH_MAX_SIZE": "9", "BATCH_MAX_WAIT_MS": "5", "BATCH_ENABLED": "yes"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxSize != 4 || c.MaxWait != 5*time.Millisecond || !c.Enabled || c.MaxConcurrency != 8 {
		t.Fatalf("got size %d wait %v enabled %v conc %d; want 4 (flag), 5ms (env), true (env), 8 (default)",
			c.MaxSize, c.MaxWait, c.Enabled, c.MaxConcurrency)
	}
}

func TestBadValuesNameSettingValueAndAccepted(t *testing.T) {
	for _, tc := range []struct{ key, val, want string }{
		{"BATCH_MAX_SIZE", "ten", `invalid BATCH_MAX_SIZE="ten" (from environment): not a whole number; accepted: a whole number >= 1`},
		{"BATCH_MAX_SIZE", "0", "must be at least 1"},
		{"BATCH_MAX_CONCURRENCY", "-3", "must be at least 1"},
		{"BATCH_MAX_WAIT_MS", "-1", "must be at least 0"},
		{"BATCH_TIMEOUT_S", "1.5", "not a whole number"},
		{"BATCH_ENABLED", "enabled", "not a boolean word; accepted: 1/0, true/false, yes/no, on/off"},
		{"UPSTREAM_URL", "api.anthropic.com", "scheme must be http or https"},
		{"UPSTREAM_URL", "ftp://x", "scheme must be http or https"},
		{"LISTEN_ADDR", "8080", "missing :port"},
		{"STREAM_IDLE_TIMEOUT_S", "0", "must be at least 1"},
	} {
		_, err := Load(nil, env(map[string]string{tc.key: tc.val}))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s=%q: err = %v; want it to name the setting and contain %q", tc.key, tc.val, err, tc.want)
		}
	}
}

func TestBooleanWords(t *testing.T) {
	for word, want := range map[string]bool{"1": true, "TRUE": true, "on": true, "yes": true, "0": false, "false": false, "Off": false, "no": false} {
		c, err := Load(nil, env(map[string]string{"BATCH_ENABLED": word}))
		if err != nil || c.Enabled != want {
			t.Errorf("BATCH_ENABLED=%q: %v, %v; want %v", word, c.Enabled, err, want)
		}
	}
}

func TestUpstreamKeepsPathPrefix(t *testing.T) {
	c, err := Load(nil, env(map[string]string{"UPSTREAM_URL": "http://gw.internal:8000/anthropic/"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.UpstreamURL.Host != "gw.internal:8000" || c.UpstreamURL.Path != "/anthropic" {
		t.Fatalf("upstream = %v", c.UpstreamURL)
	}
}

func TestTableListsEverySetting(t *testing.T) {
	var b strings.Builder
	WriteTable(&b)
	md := MarkdownTable()
	for _, s := range Settings {
		if !strings.Contains(b.String(), s.Env) || !strings.Contains(md, "`"+s.Env+"`") {
			t.Errorf("%s missing from the help or Markdown table", s.Env)
		}
	}
}

func TestHelpTableFitsIn80ColumnsAndListsAcceptedValues(t *testing.T) {
	var b strings.Builder
	WriteTable(&b)
	for i, line := range strings.Split(b.String(), "\n") {
		if len(line) > HelpWidth {
			t.Errorf("line %d is %d columns: %q", i+1, len(line), line)
		}
	}
	for _, s := range Settings {
		// The accepted values may be wrapped; compare with the spaces
		// folded.
		if !strings.Contains(strings.Join(strings.Fields(b.String()), " "), "Accepts: "+s.Accepts+".") {
			t.Errorf("%s: the help does not list what it accepts (%s)", s.Env, s.Accepts)
		}
	}
	if !strings.Contains(b.String(), "BATCH_MAX_SIZE  --batch-max-size  (default 16)\n    Flush once") {
		t.Errorf("a setting's block is not its name, flag and default, then the meaning indented:\n%s", b.String())
	}
}

func TestWrapBreaksAtSpacesWithinTheWidth(t *testing.T) {
	got := wrap("aaa bbb ccc ddd", "  ", 10)
	if want := "  aaa bbb\n  ccc ddd\n"; got != want {
		t.Fatalf("wrap = %q; want %q", got, want)
	}
	if got := wrap("https://a-very-long-word.example", "  ", 10); got != "  https://a-very-long-word.example\n" {
		t.Fatalf("a word longer than the line: %q", got)
	}
}

// An error about a URL setting never shows the password in it, and a user
// or password in UPSTREAM_URL, which sluice would not send, is refused.
func TestURLSettingErrorsHideThePassword(t *testing.T) {
	for _, v := range []string{"https://user:s3cr3t@gw.internal/?region=eu", "https://user:s3cr3t@gw.internal"} {
		_, err := Load(nil, func(k string) (string, bool) {
			if k == "UPSTREAM_URL" {
				return v, true
			}
			return "", false
		})
		if err == nil {
			t.Fatalf("UPSTREAM_URL=%s accepted", v)
		}
		if strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), "UPSTREAM_URL") {
			t.Errorf("error %q: want it to name the setting and hide the password", err)
		}
	}
}

// A token in a URL's query is a secret as much as its password: an error
// about UPSTREAM_URL or PUBLIC_URL never shows it (it showed ?token= while it
// masked a password).
func TestURLSettingErrorsHideTheQuery(t *testing.T) {
	for _, setting := range []string{"UPSTREAM_URL", "PUBLIC_URL"} {
		for _, v := range []string{"https://gw.internal/?token=s3cr3t", "https://gw.internal/v1?a=1&key=s3cr3t", "https://gw.internal/#s3cr3t"} {
			_, err := Load(nil, env(map[string]string{setting: v}))
			if err == nil {
				t.Fatalf("%s=%s accepted", setting, v)
			}
			if strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), setting) || !strings.Contains(err.Error(), "gw.internal") {
				t.Errorf("error %q: want it to name the setting and the host, and hide the query", err)
			}
		}
	}
}

// REDIS_URL holds a password: no error about it, nor about the redis
// settings, ever quotes it.
func TestRedisURLNeverShown(t *testing.T) {
	const secret = "s3cret-pw"
	for _, v := range []string{
		"redis://:" + secret + "@",             // no host
		"http://:" + secret + "@host:6379",     // wrong scheme
		"redis://:" + secret + "%zz@host:6379", // not a URL at all
	} {
		_, err := Load(nil, env(map[string]string{"GATE_BACKEND": "redis", "REDIS_URL": v}))
		if err == nil {
			t.Errorf("REDIS_URL=%q loaded; want an error", v)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error about a bad REDIS_URL shows its password: %v", err)
		}
	}
	if _, err := Load(nil, env(map[string]string{"GATE_BACKEND": "redis"})); err == nil || !strings.Contains(err.Error(), "REDIS_URL") {
		t.Errorf("GATE_BACKEND=redis without REDIS_URL: err = %v; want one naming REDIS_URL", err)
	}
	c, err := Load(nil, env(map[string]string{"GATE_BACKEND": "redis", "REDIS_URL": "redis://:" + secret + "@127.0.0.1:6379/2"}))
	if err != nil || c.GateBackend != GateRedis || c.RedisTimeout != 100*time.Millisecond || c.GateLeaseTTL != 5*time.Second {
		t.Errorf("a good redis config: %+v, %v", c, err)
	}
}

// TestPprofOnlyOnLoopback: the profiles show sluice's insides, so
// PPROF_LISTEN_ADDR takes a loopback address or nothing.
func TestPprofOnlyOnLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{
		"": true, "127.0.0.1:6060": true, "[::1]:6060": true, "localhost:6060": true,
		"0.0.0.0:6060": false, ":6060": false, "10.0.0.5:6060": false, "pprof.example:6060": false, "127.0.0.1": false,
	} {
		c, err := Load(nil, env(map[string]string{"PPROF_LISTEN_ADDR": addr}))
		if (err == nil) != ok {
			t.Errorf("PPROF_LISTEN_ADDR=%q: err %v, want accepted %v", addr, err, ok)
		}
		if ok && c.PprofListenAddr != addr {
			t.Errorf("PPROF_LISTEN_ADDR=%q: read as %q", addr, c.PprofListenAddr)
		}
	}
}

// BULK_KEY_WEBHOOKS maps key hashes to URLs; a bad entry is named by its
// place and hash, and no error quotes the value (a URL may hold a token).
func TestBulkKeyWebhooks(t *testing.T) {
	const a, b = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	c, err := Load(nil, env(map[string]string{"BULK_KEY_WEBHOOKS": a + "=https://hooks.example/a?token=t0k, " + b + "=http://10.0.0.1:9000/b"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.BulkKeyWebhooks) != 2 || c.BulkKeyWebhooks[a] != "https://hooks.example/a?token=t0k" || c.BulkKeyWebhooks[b] != "http://10.0.0.1:9000/b" {
		t.Errorf("BulkKeyWebhooks %v", c.BulkKeyWebhooks)
	}
	if c := Default(); c.BulkKeyWebhooks != nil {
		t.Errorf("default BulkKeyWebhooks %v; want none", c.BulkKeyWebhooks)
	}
	for _, tc := range []struct{ v, want string }{
		{a + "=ftp://hooks.example/a?token=t0k", "entry 1 (key " + a + ")"},
		{a + "=https://x/?token=t0k " + a + "=https://y/?token=t0k", "entry 2: key " + a + " is given twice"},
		{"ABC=https://x/?token=t0k", "entry 1: the key hash must be 32 lowercase hex"},
		{"https://x/t0k", "entry 1: want HASH=URL"},
	} {
		_, err := Load(nil, env(map[string]string{"BULK_KEY_WEBHOOKS": tc.v}))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "t0k") {
			t.Errorf("BULK_KEY_WEBHOOKS=%s: error %v; want %q, without the URL", tc.v, err, tc.want)
		}
	}
}

// SPEND_STORE takes memory, sqlite or a PostgreSQL DSN, which holds a
// password: a value refused is not repeated in the error.
func TestSpendStore(t *testing.T) {
	for v, want := range map[string]SpendStore{"memory": SpendStoreMemory, "sqlite": SpendStoreSQLite,
		"postgres://u:pw@db:5432/books": SpendStorePostgres, "postgresql://db/books?sslmode=require": SpendStorePostgres} {
		c, err := Load(nil, env(map[string]string{"SPEND_STORE": v}))
		if err != nil || c.SpendStore != want || (want == SpendStorePostgres) != (c.SpendStoreDSN == v) {
			t.Errorf("SPEND_STORE=%q: %v, DSN %q, %v; want %v", v, c.SpendStore, c.SpendStoreDSN, err, want)
		}
	}
	const secret = "s3cret-pw"
	for _, v := range []string{"postgress://u:" + secret + "@db/books", "postgres", "mysql://u:" + secret + "@db"} {
		_, err := Load(nil, env(map[string]string{"SPEND_STORE": v}))
		if err == nil || !strings.Contains(err.Error(), "SPEND_STORE") || strings.Contains(err.Error(), secret) {
			t.Errorf("SPEND_STORE=%q: err = %v; want a refusal naming SPEND_STORE, without the password", v, err)
		}
	}
}
