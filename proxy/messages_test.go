package proxy

import (
	"mime"
	"net/http"
	"strings"
	"testing"
)

// isEventStream's shortcut (no parse unless the value names event-stream)
// answers as mime's parse alone does.
func TestIsEventStreamAsMimeParses(t *testing.T) {
	byParse := func(ct string) bool {
		mt, _, err := mime.ParseMediaType(ct)
		return err == nil && strings.EqualFold(mt, "text/event-stream")
	}
	for _, ct := range []string{
		"", "application/json", "application/json; charset=utf-8", "text/event-stream",
		"text/event-stream; charset=utf-8", "TEXT/Event-Stream", " text/event-stream ", "text/event-stream;;",
		"text/event-stream; charset", "application/event-stream", "text/event-streamx", "text/plain; x=event-stream",
		"text/event-ſtream", "text/EVENT-STREAM;charset=\"utf-8\"",
	} {
		h := http.Header{}
		if ct != "" {
			h.Set("Content-Type", ct)
		}
		if got, want := isEventStream(h), byParse(ct); got != want {
			t.Errorf("isEventStream(%q) = %v; mime's parse says %v", ct, got, want)
		}
	}
}
