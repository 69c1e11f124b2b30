package budget

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Event is what the budget webhook is sent when a budget's soft threshold
// or its limit is first passed in a period.
type Event struct {
	Type    string    `json:"type"` // budget_warning or budget_exceeded
	Budget  string    `json:"budget"`
	Tenant  string    `json:"tenant,omitempty"`
	Key     string    `json:"key,omitempty"`
	Group   string    `json:"group,omitempty"` // a group budget's: Tenant is the member
	Unit    string    `json:"unit"`
	Spent   float64   `json:"spent"`
	WarnAt  float64   `json:"warn_at,omitempty"`
	Limit   float64   `json:"limit"`
	ResetAt time.Time `json:"resets_at"`
	At      time.Time `json:"at"`
}

// webhookQueue is how many events wait for delivery; past it an event is
// dropped (and logged), so that the request path never waits.
const webhookQueue = 64

// webhookTries is how many times an event is sent before it is given up.
const webhookTries = 3

// Notify sends each warning and crossing to url, as a JSON Event in a
// POST, from a goroutine of its own: the request path only queues it. A
// delivery that fails (no answer, or not 2xx) is tried again after 1 s
// and 2 s, then logged and dropped. The URL may hold a token: it is never
// logged. Call Notify before the Set hears spend; stop ends the goroutine
// after the events queued are tried once.
func (s *Set) Notify(url string, client *http.Client) (stop func()) {
	if s == nil || url == "" {
		return func() {}
	}
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	s.events = make(chan Event, webhookQueue)
	ctx, cancel := context.WithCancel(context.Background())
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case e := <-s.events:
				s.deliver(ctx, client, url, e)
			case <-quit: // the events still queued, then out
				for {
					select {
					case e := <-s.events:
						s.deliver(ctx, client, url, e)
					default:
						return
					}
				}
			}
		}
	}()
	return func() {
		close(quit)                                // the channel stays open: a late event is queued, never a panic
		t := time.AfterFunc(5*time.Second, cancel) // the last events get a moment, not forever
		<-done
		t.Stop()
		cancel()
	}
}

// event queues e for the webhook, if there is one, without waiting.
func (s *Set) event(e Event) {
	if s.events == nil {
		return
	}
	select {
	case s.events <- e:
	default:
		s.log.Warn("budget webhook: too many events waiting; this one is dropped", "budget", e.Budget, "type", e.Type)
	}
}

func (s *Set) deliver(ctx context.Context, client *http.Client, url string, e Event) {
	body, _ := json.Marshal(e)
	var err error
	for try := range webhookTries {
		if try > 0 {
			select {
			case <-time.After(time.Duration(try) * time.Second):
			case <-ctx.Done(): // stopping: no more waits
			}
		}
		if err = post(ctx, client, url, body); err == nil || ctx.Err() != nil {
			break
		}
	}
	if err == nil {
		return
	}
	s.log.Warn("budget webhook: not delivered", "budget", e.Budget, "type", e.Type, "tries", webhookTries, "err", err)
}

func post(ctx context.Context, client *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("the URL does not make a request") // not err: it would quote the URL
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("no answer") // not err: *url.Error quotes the URL, which may hold a token
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("answered %d", resp.StatusCode)
	}
	return nil
}
