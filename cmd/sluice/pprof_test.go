package main

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// TestPprofListener: with an address the profiles answer there, under
// /debug/pprof/ only, and stop ends the listener; without one nothing
// listens.
func TestPprofListener(t *testing.T) {
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	stop, err := servePprof("", log)
	if err != nil || logs.Len() != 0 {
		t.Fatalf("no address: err %v, logged %q", err, logs.String())
	}
	stop()

	stop, err = servePprof("127.0.0.1:0", log)
	if err != nil {
		t.Fatal(err)
	}
	addr := logs.String()[strings.Index(logs.String(), "addr=")+len("addr="):]
	addr = strings.Fields(addr)[0]
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for path, want := range map[string]int{"/debug/pprof/cmdline": 200, "/debug/pprof/allocs?debug=1": 200, "/v1/messages": 404} {
		resp, err := c.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: status %d, want %d", path, resp.StatusCode, want)
		}
	}
	stop()
	if _, err := c.Get("http://" + addr + "/debug/pprof/cmdline"); err == nil {
		t.Error("the profiles still answer after stop")
	}
}
