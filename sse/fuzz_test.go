package sse

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// testEvents is a complete upstream stream, one entry per event.
var testEvents = []string{
	"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01S\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":1}}}\n\n",
	"event: ping\ndata: {\"type\": \"ping\"}\n\n",
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n",
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":15}}\n\n",
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
}

// Copy must relay the upstream's bytes exactly, cut only at event
// boundaries (each write but the last ends in a blank line), say more only
// when a whole event follows (never for the last), and never panic.
func FuzzCopyEvents(f *testing.F) {
	f.Add([]byte(strings.Join(testEvents, "")))
	f.Add([]byte("event: a\r\ndata: x\r\n\r\nevent: b\ndata: y"))
	f.Add([]byte("\n\n\n"))
	f.Add(bytes.Repeat([]byte("data: "+strings.Repeat("x", 40000)+"\n"), 2))
	f.Fuzz(func(t *testing.T, in []byte) {
		// Read at once, a byte at a time, in halves, and with EOF on the
		// last bytes' read: what a read brings must not change what is
		// relayed, nor where it is cut.
		readers := map[string]func() io.Reader{
			"whole":    func() io.Reader { return bytes.NewReader(in) },
			"one-byte": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(in)) },
			"half":     func() io.Reader { return iotest.HalfReader(bytes.NewReader(in)) },
			"data-eof": func() io.Reader { return iotest.DataErrReader(bytes.NewReader(in)) },
		}
		for name, r := range readers {
			checkCopyEvents(t, name, in, r())
		}
	})
}

func checkCopyEvents(t *testing.T, name string, in []byte, src io.Reader) {
	t.Helper()
	{
		var got []byte
		var writes [][]byte
		var mores []bool
		send := func(ev []byte, more bool) error {
			writes = append(writes, bytes.Clone(ev))
			mores = append(mores, more)
			got = append(got, ev...)
			return nil
		}
		if err := Copy(send, src, func([]byte) {}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got, in) {
			t.Fatalf("%s: relayed %q; want %q", name, got, in)
		}
		whole := func(wr []byte) bool {
			blank := string(wr) == "\n" || string(wr) == "\r\n"
			return blank || bytes.HasSuffix(wr, []byte("\n\n")) || bytes.HasSuffix(wr, []byte("\n\r\n"))
		}
		for i, wr := range writes[:max(len(writes)-1, 0)] {
			if !whole(wr) {
				t.Fatalf("%s: write %d = %q does not end an event", name, i, wr)
			}
		}
		for i, more := range mores {
			if more && (i == len(writes)-1 || !whole(writes[i+1])) {
				t.Fatalf("%s: write %d said more, but what followed was no whole event", name, i)
			}
		}
	}
}
