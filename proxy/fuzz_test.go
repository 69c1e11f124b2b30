package proxy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// inspect must accept exactly the bodies that are JSON objects, never panic,
// and read model and stream as encoding/json does.
func FuzzInspect(f *testing.F) {
	for _, s := range []string{requestJSON, streamRequestJSON, "", " ", "[]", "{", `{"model":5}`, `{"stream":"yes"}`, " \n{}", `{"a":1}x`, "\xff{}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		info, aerr := inspect(body)
		var obj map[string]json.RawMessage
		isObject := json.Unmarshal(body, &obj) == nil && obj != nil
		if (aerr == nil) != isObject {
			t.Fatalf("inspect(%q) err = %v; JSON object = %v", body, aerr, isObject)
		}
		if aerr != nil && (aerr.Status != http.StatusBadRequest || aerr.Type != "invalid_request_error") {
			t.Fatalf("inspect(%q) = %+v; want a 400 invalid_request_error", body, aerr)
		}
		if len(info.Model) > 128 {
			t.Fatalf("model of %d bytes reaches the log", len(info.Model))
		}
	})
}

// copyEvents must relay the upstream's bytes exactly, cut only at event
// boundaries (each write but the last ends in a blank line), and never panic.
func FuzzCopyEvents(f *testing.F) {
	f.Add([]byte(strings.Join(sseEvents, "")))
	f.Add([]byte("event: a\r\ndata: x\r\n\r\nevent: b\ndata: y"))
	f.Add([]byte("\n\n\n"))
	f.Add(bytes.Repeat([]byte("data: "+strings.Repeat("x", 40000)+"\n"), 2))
	f.Fuzz(func(t *testing.T, in []byte) {
		var got []byte
		var writes [][]byte
		var tally streamUsage
		send := func(ev []byte) error {
			tally.observe(ev)
			writes = append(writes, bytes.Clone(ev))
			got = append(got, ev...)
			return nil
		}
		if err := copyEvents(send, bytes.NewReader(in), func() {}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, in) {
			t.Fatalf("relayed %q; want %q", got, in)
		}
		for i, wr := range writes[:max(len(writes)-1, 0)] {
			blank := string(wr) == "\n" || string(wr) == "\r\n"
			if !blank && !bytes.HasSuffix(wr, []byte("\n\n")) && !bytes.HasSuffix(wr, []byte("\n\r\n")) {
				t.Fatalf("write %d = %q does not end an event", i, wr)
			}
		}
	})
}
