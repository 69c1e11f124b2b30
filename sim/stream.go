package sim

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/request"
)

// tokensPerDelta is how many output tokens one text_delta carries, about
// what the API sends.
const tokensPerDelta = 4

// sse writes server-sent events, one flush per event as the API does.
type sse struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf []byte
	err error
}

func (e *sse) send(name string, v any) error {
	if e.err != nil {
		return e.err
	}
	data, err := json.Marshal(v)
	if err != nil {
		e.err = err
		return err
	}
	e.buf = append(e.buf[:0], "event: "...)
	e.buf = append(e.buf, name...)
	e.buf = append(e.buf, "\ndata: "...)
	e.buf = append(e.buf, data...)
	e.buf = append(e.buf, "\n\n"...)
	if _, err := e.w.Write(e.buf); err != nil {
		e.err = err
		return err
	}
	if err := e.rc.Flush(); err != nil {
		e.err = err
	}
	return e.err
}

type contentBlockStart struct {
	Type         string     `json:"type"`
	Index        int        `json:"index"`
	ContentBlock outContent `json:"content_block"`
}

type blockDelta struct {
	Type        string  `json:"type"`
	Text        *string `json:"text,omitempty"`
	Thinking    *string `json:"thinking,omitempty"`
	Signature   *string `json:"signature,omitempty"`
	PartialJSON *string `json:"partial_json,omitempty"`
}

type contentBlockDelta struct {
	Type  string     `json:"type"`
	Index int        `json:"index"`
	Delta blockDelta `json:"delta"`
}

type indexEvent struct {
	Type  string `json:"type"`
	Index int    `json:"index"`
}

type typeOnly struct {
	Type string `json:"type"`
}

type deltaUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

type messageDelta struct {
	Type  string `json:"type"`
	Delta struct {
		StopReason   string  `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	} `json:"delta"`
	Usage deltaUsage `json:"usage"`
}

// stream sends the reply as SSE, pacing deltas by the latency model.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, x *exchange) {
	ctx := r.Context()
	g := x.gen
	if g.waitFor(ctx, g.atToken(0)) != nil {
		return
	}
	s.begin(x)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	ev := &sse{w: w, rc: http.NewResponseController(w)}

	sent := 0 // events sent, for the faults that act after a few
	emit := func(name string, v any) bool {
		if x.fault == "slow-stream" && sent > 0 && pause(ctx, s.cfg.SlowStreamInterval) != nil {
			return false
		}
		if ev.send(name, v) != nil {
			return false
		}
		sent++
		switch {
		case x.fault == "reset" && sent == 3:
			dropConnection(w)
			return false
		case x.fault == "huge-event" && sent == 1:
			// One data line of hugeEventSize bytes that never ends.
			_, _ = io.WriteString(w, "event: content_block_delta\ndata: ")
			chunk := bytes.Repeat([]byte("x"), 64<<10)
			for n := 0; n < hugeEventSize; n += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return false
				}
			}
			_ = ev.rc.Flush()
			return false
		case x.fault == "midstream-error" && sent == 4:
			_ = ev.send("error", apierror.Envelope("overloaded_error", "Overloaded", ""))
			return false
		}
		return true
	}

	start := x.rep.message(x.id, x.req.Model, x.usage)
	start.Diagnostics = x.diag
	start.Content = []outContent{}
	start.StopReason = nil
	start.StopSequence = nil
	start.Usage.OutputTokens = 1
	if !emit("message_start", struct {
		Type    string     `json:"type"`
		Message outMessage `json:"message"`
	}{"message_start", start}) {
		return
	}

	done := 0 // output tokens sent so far
	for i, b := range x.rep.blocks {
		cb := outContent{Type: b.kind}
		empty := ""
		switch b.kind {
		case "text":
			cb.Text = &empty
		case "thinking":
			cb.Thinking, cb.Signature = &empty, &empty
		default:
			cb.ID, cb.Name, cb.Input = b.id, b.name, json.RawMessage(`{}`)
		}
		if !emit("content_block_start", contentBlockStart{"content_block_start", i, cb}) {
			return
		}
		if i == 0 && !emit("ping", typeOnly{"ping"}) {
			return
		}
		for _, piece := range b.deltas() {
			if g.waitFor(ctx, g.atToken(max(0, done+piece.tokens-1))) != nil {
				return
			}
			done += piece.tokens
			d := contentBlockDelta{Type: "content_block_delta", Index: i}
			switch {
			case piece.signature:
				d.Delta = blockDelta{Type: "signature_delta", Signature: &piece.text}
			case b.kind == "thinking":
				d.Delta = blockDelta{Type: "thinking_delta", Thinking: &piece.text}
			case b.kind == "text":
				d.Delta = blockDelta{Type: "text_delta", Text: &piece.text}
			default:
				d.Delta = blockDelta{Type: "input_json_delta", PartialJSON: &piece.text}
			}
			if !emit("content_block_delta", d) {
				return
			}
		}
		if !emit("content_block_stop", indexEvent{"content_block_stop", i}) {
			return
		}
	}
	md := messageDelta{Type: "message_delta"}
	md.Delta.StopReason = x.rep.stopReason
	md.Delta.StopSequence = x.rep.stopSequence
	md.Usage = deltaUsage{x.usage.InputTokens, x.usage.CacheCreationInputTokens, x.usage.CacheReadInputTokens, x.usage.OutputTokens}
	if !emit("message_delta", md) || !emit("message_stop", typeOnly{"message_stop"}) {
		return
	}
	s.stats.record(x.req.Model, x.usage, false)
}

type deltaPiece struct {
	text      string
	tokens    int
	signature bool // a thinking block's closing signature_delta
}

// deltas splits a block into the pieces its content_block_delta events carry.
func (b replyBlock) deltas() []deltaPiece {
	var out []deltaPiece
	if b.kind == "thinking" {
		// Thought in thinking_deltas, then its signature; an omitted
		// thought sends only the signature, once its tokens are generated.
		if b.omitted {
			return []deltaPiece{{text: b.signature, tokens: b.cost, signature: true}}
		}
		t := b
		t.kind = "text"
		return append(t.deltas(), deltaPiece{text: b.signature, signature: true})
	}
	if b.kind == "text" {
		for i := 0; i < len(b.tokens); i += tokensPerDelta {
			j := min(i+tokensPerDelta, len(b.tokens))
			out = append(out, deltaPiece{text: strings.Join(b.tokens[i:j], ""), tokens: j - i})
		}
		return out
	}
	// The API opens tool input with an empty partial_json, then chunks.
	out = append(out, deltaPiece{})
	in := string(b.input)
	step := tokensPerDelta * request.CharsPerToken
	left := b.cost
	for i := 0; i < len(in); i += step {
		j := min(i+step, len(in))
		t := min(tokensPerDelta, left)
		if j == len(in) {
			t = left
		}
		left -= t
		out = append(out, deltaPiece{text: in[i:j], tokens: t})
	}
	return out
}
