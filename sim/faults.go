package sim

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/request"
)

// Fault names accepted in the x-sim-fault header. A name with the suffix
// "-once" (e.g. "529-once") applies only to the first request with its key:
// the x-sim-fault-key header, or else the request body's hash, so an SDK's
// retry of the same request gets through.
var faultNames = map[string]bool{
	"403": true, "429": true, "500": true, "529": true, "hang": true, "reset": true,
	"slow-stream": true, "bad-json": true, "midstream-error": true, "huge-event": true,
}

// hugeEventSize is the length of the line the huge-event fault sends: past
// any bound a relay should buffer for one event.
const hugeEventSize = 12 << 20

// faultMemory remembers which "-once" faults have fired.
type faultMemory struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (f *faultMemory) first(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen[key] {
		return false
	}
	f.seen[key] = true
	return true
}

func (f *faultMemory) reset() {
	f.mu.Lock()
	clear(f.seen)
	f.mu.Unlock()
}

// pickFault decides which fault, if any, this request gets: the header's,
// else one drawn from the configured rates.
func (s *Server) pickFault(r *http.Request, hash uint64) (fault, key string) {
	if v := strings.TrimSpace(r.Header.Get("x-sim-fault")); v != "" {
		name, once := strings.CutSuffix(v, "-once")
		if !faultNames[name] {
			return "", "" // unknown faults are ignored rather than failing the request
		}
		if once {
			key = r.Header.Get("x-sim-fault-key")
			if key == "" {
				key = strconv.FormatUint(hash, 16)
			}
			if !s.faults.first(name + "\x00" + key) {
				return "", ""
			}
		}
		return name, key
	}
	if f := s.outage(r); f != "" {
		return f, ""
	}
	c := s.cfg
	if c.FaultRate429+c.FaultRate500+c.FaultRate529 <= 0 {
		return "", ""
	}
	u := unit(mix(uint64(c.Seed)^0xfa17, s.arrival.Add(1)))
	switch {
	case u < c.FaultRate429:
		return "429", ""
	case u < c.FaultRate429+c.FaultRate500:
		return "500", ""
	case u < c.FaultRate429+c.FaultRate500+c.FaultRate529:
		return "529", ""
	}
	return "", ""
}

// outage is the fault of an outage r arrived in, by its status; "" when
// it arrived in none.
func (s *Server) outage(r *http.Request) string {
	if len(s.cfg.Outages) == 0 {
		return ""
	}
	at := time.Since(s.start)
	cred := ""
	for _, o := range s.cfg.Outages {
		if at < o.From || at >= o.To {
			continue
		}
		if len(o.Credentials) > 0 {
			if cred == "" {
				cred = request.Tenant(r.Header)
			}
			if !slices.Contains(o.Credentials, cred) {
				continue
			}
		}
		return strconv.Itoa(o.status())
	}
	return ""
}

// writeFault answers with an injected error status.
func (s *Server) writeFault(w http.ResponseWriter, r *http.Request, fault, _ string) {
	h := w.Header()
	if ms := r.Header.Get("x-sim-retry-after-ms"); ms != "" {
		if n, err := strconv.Atoi(ms); err == nil && n >= 0 {
			h.Set("retry-after-ms", strconv.Itoa(n))
		}
	}
	var e *apierror.Error
	switch fault {
	case "429":
		if h.Get("retry-after-ms") == "" {
			h.Set("retry-after", "1")
		}
		e = apierror.New(429, "rate_limit_error", "This request would exceed your rate limit (injected fault); retry after retry-after")
	case "500":
		e = apierror.New(500, "api_error", "Internal server error (injected fault); retry the request")
	case "403":
		e = apierror.New(403, "permission_error", "Your credentials do not permit this request (injected fault)")
	default:
		e = apierror.New(529, "overloaded_error", "Overloaded (injected fault); retry with backoff")
	}
	writeError(w, e)
}

// hang never answers: it waits for the client to leave or the server to
// close, so a caller's timeouts can be tested.
func (s *Server) hang(w http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.ctx.Done():
		writeError(w, apierror.New(529, "overloaded_error", "simulator closed while the request hung"))
	}
}

// dropConnection closes the underlying connection mid-response, as a reset
// by a load balancer would. Where the connection cannot be taken over (for
// example under HTTP/2 or a recorder) the response just ends short.
func dropConnection(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	conn, _, err := rc.Hijack()
	if err != nil {
		return
	}
	_ = conn.Close()
}
