package sse

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// A non-streaming request that leads a cold prompt prefix under
// CACHE_AWARE is sent upstream as a stream: its followers are held until
// its response has begun, and a stream begins at its first token, a whole
// JSON answer only at its last. Its client, which asked for JSON, gets the
// Message reassembled from the events: equal as JSON to what the API
// answers without stream (the same members in the same order, the same
// values), though not byte for byte, since the strings the deltas carry are
// encoded again by sluice (docs/semantics.md (Shared prompt prefixes) lists the
// differences).

// StreamingBody is body, a JSON object, asking for a stream. A body that
// does not name stream gets it added as its last member, leaving every
// other byte as it was; one that does (stream: false) is encoded again with
// its members in sorted order, their values as they were.
func StreamingBody(body []byte) ([]byte, error) {
	trimmed := bytes.TrimRight(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[len(trimmed)-1] != '}' {
		return nil, errors.New("not a JSON object")
	}
	if !bytes.Contains(body, []byte(`"stream"`)) {
		head := bytes.TrimRight(trimmed[:len(trimmed)-1], " \t\r\n")
		out := append([]byte(nil), head...)
		if !bytes.HasSuffix(head, []byte("{")) {
			out = append(out, ',')
		}
		return append(out, `"stream":true}`...), nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	m["stream"] = json.RawMessage("true")
	return json.Marshal(m)
}

// errorStatus is the HTTP status the API answers with an error of type t.
func errorStatus(t string) int {
	switch t {
	case "invalid_request_error":
		return http.StatusBadRequest
	case "authentication_error":
		return http.StatusUnauthorized
	case "billing_error":
		return http.StatusPaymentRequired
	case "permission_error":
		return http.StatusForbidden
	case "not_found_error":
		return http.StatusNotFound
	case "request_too_large":
		return http.StatusRequestEntityTooLarge
	case "rate_limit_error":
		return http.StatusTooManyRequests
	case "timeout_error":
		return http.StatusGatewayTimeout
	case "overloaded_error":
		return 529
	}
	return http.StatusInternalServerError
}

// ErrStreamIncomplete is a stream that ended before message_stop.
var ErrStreamIncomplete = errors.New("the upstream's stream ended before message_stop")

// reassemble builds, from a whole Messages event stream, what the API
// answers the same request without stream: the Message, status 200; or,
// for a stream that ended with an error event, that error, with the status
// the API gives its type and requestID as its request_id. A stream cut
// short, or with an event it cannot read, is an error.
func Reassemble(events []byte, requestID string) (int, []byte, error) {
	var (
		msg     object
		blocks  []*block
		stopped bool
	)
	err := Copy(func(ev []byte, _ bool) error {
		name, data := eventParts(ev)
		switch name {
		case "message_start":
			var v struct {
				Message json.RawMessage `json:"message"`
			}
			if err := json.Unmarshal(data, &v); err != nil {
				return fmt.Errorf("message_start: %w", err)
			}
			o, err := decodeObject(v.Message)
			if err != nil {
				return fmt.Errorf("message_start: %w", err)
			}
			msg = o
		case "content_block_start":
			var v struct {
				Index        int             `json:"index"`
				ContentBlock json.RawMessage `json:"content_block"`
			}
			if err := json.Unmarshal(data, &v); err != nil || v.Index != len(blocks) {
				return fmt.Errorf("content_block_start %d after %d blocks: %v", v.Index, len(blocks), err)
			}
			o, err := decodeObject(v.ContentBlock)
			if err != nil {
				return fmt.Errorf("content_block_start: %w", err)
			}
			blocks = append(blocks, &block{obj: o})
		case "content_block_delta":
			var v struct {
				Index int   `json:"index"`
				Delta delta `json:"delta"`
			}
			if err := json.Unmarshal(data, &v); err != nil || v.Index < 0 || v.Index >= len(blocks) {
				return fmt.Errorf("content_block_delta for block %d of %d: %v", v.Index, len(blocks), err)
			}
			blocks[v.Index].add(v.Delta)
		case "message_delta":
			var v struct {
				Delta json.RawMessage `json:"delta"`
				Usage json.RawMessage `json:"usage"`
			}
			if err := json.Unmarshal(data, &v); err != nil || msg == nil {
				return fmt.Errorf("message_delta: %v", err)
			}
			if err := msg.merge(v.Delta); err != nil {
				return fmt.Errorf("message_delta: %w", err)
			}
			if v.Usage != nil {
				usage, err := decodeObject(msg.get("usage"))
				if err != nil {
					usage = object{}
				}
				if err := usage.merge(v.Usage); err != nil {
					return fmt.Errorf("message_delta usage: %w", err)
				}
				msg.set("usage", usage.encode())
			}
		case "message_stop":
			stopped = true
		case "error":
			return &inBandError{data: data}
		}
		return nil
	}, bytes.NewReader(events), func([]byte) {})
	var ib *inBandError
	switch {
	case errors.As(err, &ib):
		return ib.answer(requestID)
	case err != nil:
		return 0, nil, err
	case !stopped || msg == nil:
		return 0, nil, ErrStreamIncomplete
	}
	var content bytes.Buffer
	content.WriteByte('[')
	for i, b := range blocks {
		if i > 0 {
			content.WriteByte(',')
		}
		raw, err := b.encode()
		if err != nil {
			return 0, nil, err
		}
		content.Write(raw)
	}
	content.WriteByte(']')
	msg.set("content", content.Bytes())
	return http.StatusOK, append(msg.encode(), '\n'), nil
}

// eventParts is an event's name and the data of its (first) data line.
func eventParts(ev []byte) (name string, data []byte) {
	for _, line := range bytes.Split(ev, []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		switch {
		case bytes.HasPrefix(line, []byte("event:")):
			name = string(bytes.TrimSpace(line[len("event:"):]))
		case bytes.HasPrefix(line, []byte("data:")) && data == nil:
			data = bytes.TrimSpace(line[len("data:"):])
		}
	}
	return name, data
}

// inBandError is an error event in the stream.
type inBandError struct{ data []byte }

func (e *inBandError) Error() string { return "in-band error event" }

// answer is the error as the API answers it to a non-streaming request.
func (e *inBandError) answer(requestID string) (int, []byte, error) {
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(e.data, &v); err != nil || v.Error == nil {
		return 0, nil, fmt.Errorf("unreadable error event: %s", e.data)
	}
	var t struct {
		Type string `json:"type"`
	}
	json.Unmarshal(v.Error, &t)
	body, err := json.Marshal(struct {
		Type      string          `json:"type"`
		Error     json.RawMessage `json:"error"`
		RequestID string          `json:"request_id,omitempty"`
	}{"error", v.Error, requestID})
	return errorStatus(t.Type), append(body, '\n'), err
}

// delta is a content_block_delta's delta.
type delta struct {
	Type        string          `json:"type"`
	Text        string          `json:"text"`
	Thinking    string          `json:"thinking"`
	Signature   string          `json:"signature"`
	PartialJSON string          `json:"partial_json"`
	Citation    json.RawMessage `json:"citation"`
}

// block is one content block being reassembled: the object its
// content_block_start gave, and what its deltas add.
type block struct {
	obj       object
	text      map[string]*strings.Builder // "text", "thinking": appended to the start's value
	partial   strings.Builder             // a tool_use's input, in pieces
	hasInput  bool
	citations []json.RawMessage
}

func (b *block) add(d delta) {
	appendTo := func(key, s string) {
		if b.text == nil {
			b.text = map[string]*strings.Builder{}
		}
		sb := b.text[key]
		if sb == nil {
			sb = &strings.Builder{}
			var start string
			json.Unmarshal(b.obj.get(key), &start) // "" at the start, as a rule
			sb.WriteString(start)
			b.text[key] = sb
		}
		sb.WriteString(s)
	}
	switch d.Type {
	case "text_delta":
		appendTo("text", d.Text)
	case "thinking_delta":
		appendTo("thinking", d.Thinking)
	case "signature_delta":
		b.obj.set("signature", encodeString(d.Signature))
	case "input_json_delta":
		b.hasInput = true
		b.partial.WriteString(d.PartialJSON)
	case "citations_delta":
		b.citations = append(b.citations, d.Citation)
	}
}

// encode is the block as the non-streaming answer carries it.
func (b *block) encode() ([]byte, error) {
	for key, sb := range b.text {
		b.obj.set(key, encodeString(sb.String()))
	}
	if b.hasInput {
		input := strings.TrimSpace(b.partial.String())
		if input == "" {
			input = "{}"
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, []byte(input)); err != nil {
			return nil, fmt.Errorf("a tool_use block's input is not JSON: %w", err)
		}
		b.obj.set("input", compact.Bytes())
	}
	if len(b.citations) > 0 {
		var existing []json.RawMessage
		json.Unmarshal(b.obj.get("citations"), &existing)
		all, _ := json.Marshal(append(existing, b.citations...))
		b.obj.set("citations", all)
	}
	return b.obj.encode(), nil
}

// encodeString is s as a JSON string, with <, > and & as they are (the
// API does not escape them).
func encodeString(s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// object is a JSON object's members in their order, values raw.
type object []member

type member struct {
	key string
	val json.RawMessage
}

// decodeObject reads the JSON object raw, keeping its members' order.
func decodeObject(raw []byte) (object, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object: %.40s", raw)
	}
	o := object{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		o.set(t.(string), v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the object")
	}
	return o, nil
}

func (o object) get(key string) json.RawMessage {
	for _, m := range o {
		if m.key == key {
			return m.val
		}
	}
	return nil
}

// set replaces key's value, or adds key last.
func (o *object) set(key string, val []byte) {
	for i := range *o {
		if (*o)[i].key == key {
			(*o)[i].val = val
			return
		}
	}
	*o = append(*o, member{key, val})
}

// merge sets each member of the object raw on o.
func (o *object) merge(raw json.RawMessage) error {
	if raw == nil {
		return nil
	}
	add, err := decodeObject(raw)
	if err != nil {
		return err
	}
	for _, m := range add {
		o.set(m.key, m.val)
	}
	return nil
}

func (o object) encode() []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(encodeString(m.key))
		b.WriteByte(':')
		b.Write(m.val)
	}
	b.WriteByte('}')
	return b.Bytes()
}
