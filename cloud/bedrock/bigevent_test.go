package bedrock

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream/eventstreamapi"
)

// TestBigEventMemory: one 11 MB Messages event in a Bedrock chunk frame
// (15 MB of base64) is turned into SSE allocating a small multiple of the
// event: the frame once, at its size, the event once, and no copy of
// either for the SSE (it was about 78 MB: the frame's buffer grown by
// doubling, the base64 copied into a string, the SSE built by append).
// The figure is the bytes allocated (runtime.MemStats.TotalAlloc) while
// the stream is read, not a time.
func TestBigEventMemory(t *testing.T) {
	text := strings.Repeat("a", 11<<20)
	event := []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + text + `"}}`)
	payload := []byte(`{"bytes":"` + base64.StdEncoding.EncodeToString(event) + `","p":"abcdefgh"}`)
	var frame bytes.Buffer
	msg := eventstream.Message{Payload: payload}
	msg.Headers.Set(eventstreamapi.MessageTypeHeader, eventstream.StringValue(eventstreamapi.EventMessageType))
	msg.Headers.Set(eventstreamapi.EventTypeHeader, eventstream.StringValue("chunk"))
	if err := eventstream.NewEncoder().Encode(&frame, msg); err != nil {
		t.Fatal(err)
	}
	raw := frame.Bytes()
	payload, event, text = nil, nil, ""
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	resp := streamAnswer(httptest.NewRequest(http.MethodPost, "/v1/messages", nil), &http.Response{StatusCode: 200, Body: io.NopCloser(bytes.NewReader(raw))}, "", "bedrock backend", aws.Credentials{})
	buf := make([]byte, 32<<10)
	n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{resp.Body}, buf)
	runtime.ReadMemStats(&after)
	if err != nil || n < 11<<20 {
		t.Fatalf("read %d bytes of SSE: %v", n, err)
	}
	const eventSize = 11 << 20
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("an 11 MB event in a %.1f MB frame: %.1f MB allocated (%.2f× the event)", float64(len(raw))/(1<<20), float64(alloc)/(1<<20), float64(alloc)/eventSize)
	if alloc > 3*eventSize {
		t.Errorf("%.1f MB allocated for one 11 MB event; want at most 3× the event (the frame and the event once each)", float64(alloc)/(1<<20))
	}
}
