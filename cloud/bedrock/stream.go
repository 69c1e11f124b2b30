package bedrock

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream/eventstreamapi"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/cloud/internal/cloudwire"
)

// streamAnswer is resp, an InvokeModelWithResponseStream answer, as the
// API's SSE stream.
func streamAnswer(in *http.Request, resp *http.Response, id, label string, creds aws.Credentials) *http.Response {
	out := *resp
	out.Header = http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}, "Cache-Control": {"no-cache"}}
	if id != "" {
		out.Header.Set("Request-Id", id)
	}
	out.ContentLength = -1
	out.Body = &sseBody{rc: resp.Body, br: bufio.NewReader(resp.Body), dec: eventstream.NewDecoder(), label: label, creds: creds}
	out.Request = in
	return &out
}

// sseBody reads AWS event-stream frames and yields SSE: a chunk event as
// the Messages event it carries, an exception or error frame as an in-band
// error event, after which the stream ends. A frame that cannot be decoded
// (a cut connection, a bad checksum) is a read error, as a broken
// first-party stream would be.
type sseBody struct {
	rc      io.ReadCloser
	br      *bufio.Reader // rc, to peek at each frame's length
	dec     *eventstream.Decoder
	label   string
	creds   aws.Credentials // scrubbed from an exception's message
	payload []byte          // the decoder's reused payload buffer
	out     []byte          // SSE not yet read: a whole small event, or a big one's head
	off     int
	body    []byte // a big event's data line, read after out and before its end
	err     error
}

// bigFrame is the frame size past which the payload buffer is not kept
// for the next frame: a stream's rare big event should not hold its
// frame's memory for the rest of the stream.
const bigFrame = 1 << 20

func (b *sseBody) Read(p []byte) (int, error) {
	for b.off == len(b.out) {
		if len(b.body) > 0 {
			n := copy(p, b.body)
			if b.body = b.body[n:]; len(b.body) == 0 {
				b.body = nil
				b.out, b.off = append(b.out[:0], "\n\n"...), 0
			}
			return n, nil
		}
		if b.err != nil {
			return 0, b.err
		}
		b.out, b.off = b.out[:0], 0
		var total uint32
		if p, err := b.br.Peek(4); err == nil {
			if total = binary.BigEndian.Uint32(p); total > maxFrame {
				b.err = fmt.Errorf("%s: event stream: a frame of %d bytes, over %d MB: not a Messages event", b.label, total, maxFrame>>20)
				continue
			}
		}
		// The decoder reads the payload into this buffer through a
		// bytes.Buffer: sized to the frame (and the Buffer's 512-byte read
		// margin) it is filled once, not grown by doubling.
		if need := int(total) + bytes.MinRead; cap(b.payload) < need {
			b.payload = make([]byte, 0, need)
		}
		msg, err := b.dec.Decode(b.br, b.payload)
		if err != nil {
			if errors.Is(err, io.EOF) {
				b.err = io.EOF
			} else {
				b.err = fmt.Errorf("%s: event stream: %w", b.label, err)
			}
			continue
		}
		b.payload = msg.Payload[:0]
		b.translate(msg)
		if cap(b.payload) > bigFrame {
			b.payload = nil
		}
	}
	n := copy(p, b.out[b.off:])
	b.off += n
	if b.off == len(b.out) && cap(b.out) > bigFrame {
		b.out, b.off = nil, 0
	}
	return n, nil
}

func (b *sseBody) Close() error { return b.rc.Close() }

func (b *sseBody) translate(msg eventstream.Message) {
	switch header(msg, eventstreamapi.MessageTypeHeader) {
	case eventstreamapi.EventMessageType:
		if header(msg, eventstreamapi.EventTypeHeader) != "chunk" {
			return // no other event type carries Messages events
		}
		data, err := decodeChunk(msg.Payload)
		if err != nil {
			b.err = fmt.Errorf("%s: event stream: %w", b.label, err)
			return
		}
		var ev struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(data, &ev) != nil || ev.Type == "" {
			b.err = fmt.Errorf("%s: event stream: a chunk is not a Messages stream event", b.label)
			return
		}
		if len(data) > bigFrame && bytes.IndexByte(data, '\n') < 0 {
			// Served from data itself, not copied into out: its head, the
			// data line, then its end (see Read).
			b.out = append(append(append(b.out, "event: "...), ev.Type...), "\ndata: "...)
			b.body = data
			return
		}
		b.out = cloudwire.SSEEvent(b.out, ev.Type, data)
	case eventstreamapi.ExceptionMessageType:
		var e struct {
			Message  string `json:"message"`
			Message2 string `json:"Message"`
		}
		_ = json.Unmarshal(msg.Payload, &e)
		if e.Message == "" {
			e.Message = e.Message2
		}
		b.fail(header(msg, eventstreamapi.ExceptionTypeHeader), e.Message)
	case eventstreamapi.ErrorMessageType:
		b.fail(header(msg, eventstreamapi.ErrorCodeHeader), header(msg, eventstreamapi.ErrorMessageHeader))
	}
}

// fail ends the stream with an in-band error event of the mapped type.
func (b *sseBody) fail(kind, message string) {
	if kind == "" {
		kind = "UnknownError"
	}
	_, typ := mapStatus(kind, 0)
	if message == "" {
		message = "the stream ended with " + kind
	}
	if i := strings.IndexByte(message, '\n'); i >= 0 {
		message = message[:i]
	}
	data, _ := json.Marshal(apierror.Envelope(typ, b.label+": "+kind+": "+scrub(message, b.creds), ""))
	b.out = cloudwire.SSEEvent(b.out, "error", data)
	b.err = io.EOF
}

func header(msg eventstream.Message, name string) string {
	if v := msg.Headers.Get(name); v != nil {
		return v.String()
	}
	return ""
}

// maxFrame bounds one event-stream frame: the decoder reads a frame whole
// into memory before anything of it is relayed, and a frame's length is
// whatever its prelude says (up to 4 GB). The API's largest event (8 MB,
// as sluice's relay bounds it) fits, base64 and all.
const maxFrame = 16 << 20
