package bulk

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Webhook headers. A receiver checks the signature, then de-duplicates on
// the id: a delivery is retried until it is answered 2xx, so it may come
// more than once.
const (
	HeaderWebhookURL       = "Sluice-Webhook-Url" // on a submission: where to deliver its result
	HeaderWebhookID        = "Sluice-Webhook-Id"
	HeaderWebhookTimestamp = "Sluice-Webhook-Timestamp"
	// HeaderWebhookSignature is "v1=" and the hex HMAC-SHA256, keyed by
	// BULK_WEBHOOK_SECRET, of the id, ".", the timestamp, "." and the body.
	HeaderWebhookSignature = "Sluice-Webhook-Signature"
)

// maxWebhookAttempts is how many times a delivery is tried, with backoff
// (2 s doubling to an hour: about a day in all), before it is given up.
const maxWebhookAttempts = 20

// Sign returns the signature header's value for a delivery.
func Sign(secret, id, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	return "v1=" + hex.EncodeToString(mac.Sum(nil))
}

// deliverer delivers due webhooks at each poll interval (and at once
// after a result arrives).
func (s *Service) deliverer() {
	defer s.wg.Done()
	t := time.NewTicker(max(s.cfg.PollInterval/4, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		for s.deliverDue(s.ctx) {
		}
	}
}

// deliverDue tries one round of due deliveries and reports whether there
// may be more.
func (s *Service) deliverDue(ctx context.Context) bool {
	due, err := s.store.dueWebhooks(ctx, 50, time.Now().Add(time.Minute).UnixMilli())
	if err != nil {
		if ctx.Err() == nil {
			s.log.Error("bulk: reading due webhooks failed", "err", err)
		}
		return false
	}
	// At once, not one after another: a receiver that never answers costs
	// the round one webhook client timeout, not one per delivery of its
	// own, so one client's slow receiver cannot hold back everyone's.
	var wg sync.WaitGroup
	for _, d := range due {
		wg.Go(func() { s.deliver(ctx, d) })
	}
	wg.Wait()
	return len(due) == 50 && ctx.Err() == nil
}

func (s *Service) deliver(ctx context.Context, d webhookDue) {
	r, err := s.store.get(ctx, d.keyHash, d.requestID)
	if err != nil || r == nil {
		s.store.webhookTried(ctx, d.id, "failed", d.attempts, 0)
		return
	}
	body, _ := json.Marshal(map[string]any{"id": d.id, "type": "bulk_message.ended", "data": view(r)})
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(body))
	if err == nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(HeaderWebhookID, d.id)
		req.Header.Set(HeaderWebhookTimestamp, ts)
		req.Header.Set(HeaderWebhookSignature, Sign(s.cfg.WebhookSecret, d.id, ts, body))
		var resp *http.Response
		if resp, err = s.hooks.Do(req); err == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				s.m.webhooks.Inc()
				s.store.webhookTried(ctx, d.id, "delivered", d.attempts+1, 0)
				return
			}
		}
	}
	if ctx.Err() != nil {
		return // the lease runs out and the next start delivers it
	}
	s.m.webhookFailures.Inc()
	n := d.attempts + 1
	if n >= maxWebhookAttempts {
		s.log.Warn("bulk: a webhook was given up after its last attempt", "webhook", d.id, "attempts", n)
		s.store.webhookTried(ctx, d.id, "failed", n, 0)
		return
	}
	backoff := min(2*time.Second<<min(n-1, 20), time.Hour)
	s.store.webhookTried(ctx, d.id, "pending", n, time.Now().Add(backoff).UnixMilli())
}
