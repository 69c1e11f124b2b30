package proxy

import (
	"io"
	"net/http"
	"strings"
	"time"
)

// lingerBytes and lingerTime bound how much of a refused body sluice reads
// and throws away, and for how long, before it closes the connection.
const (
	lingerBytes = 64 << 20
	lingerTime  = 2 * time.Second
)

// drainRefused reads and discards what is left of r's body once sluice
// has answered it with the connection's last answer (closing) before
// reading it all: a 429 past BODY_BUDGET_MB, a 413, a refusal on the
// headers. Closing a socket with unread bytes in it makes the kernel reset
// the connection, and a reset throws away the answer a client still
// sending has not read yet: it would see "connection reset" where sluice
// said "retry after 2 s" (nginx's lingering close, for the same reason).
// Bounded by lingerBytes and lingerTime, and by MAX_PENDING_CONNS: a
// connection being drained counts as one that has not sent its request
// (it has not), and past the bound it is closed at once, so refusals,
// which come before any key is checked, cannot hold more connections than
// the bound. Not drained: a body that came too slowly (408), a client
// that left (499), and one that asked to be told to go on (Expect:
// 100-continue) and was refused instead, which sends no body.
func (p *Proxy) drainRefused(w http.ResponseWriter, r *http.Request, status int) {
	if status == http.StatusRequestTimeout || status == errClientGone.Status ||
		r.Body == nil || r.Body == http.NoBody || w.Header().Get("Connection") != "close" ||
		strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
		return
	}
	if !p.pendingConns.take(p.cfg.MaxPendingConns) {
		return
	}
	defer p.pendingConns.give()
	rc := http.NewResponseController(w)
	if rc.EnableFullDuplex() != nil || rc.SetReadDeadline(time.Now().Add(lingerTime)) != nil {
		return
	}
	_, _ = io.CopyN(io.Discard, r.Body, lingerBytes)
}
