package bulk

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/sluicehq/sluice/apierror"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/spend"
	"github.com/sluicehq/sluice/window"
)

// Config sets a Service up. Zero values take the documented defaults.
type Config struct {
	// Store is "sqlite" (the default: a file in DataDir) or a postgres://
	// DSN (several replicas may share it).
	Store string
	// DataDir holds the SQLite file and the generated credential key. If
	// empty, "data".
	DataDir string
	// Secret, if set, is what the credentials' encryption key is derived
	// from; else a random key is generated into DataDir/bulk.key (0600).
	// Replicas sharing a PostgreSQL need the same Secret.
	Secret string
	// WebhookSecret signs webhook deliveries (HMAC-SHA256). If empty,
	// submissions asking for a webhook are refused.
	WebhookSecret string
	// KeyWebhooks are the keys' default completion webhooks, by the key's
	// short hash (BULK_KEY_WEBHOOKS): a submission without
	// Sluice-Webhook-Url gets its key's. They need WebhookSecret.
	KeyWebhooks map[string]string
	// MaxWait is how long a window gathers one credential's submissions
	// before they go upstream as one batch. If zero, 5 minutes.
	MaxWait time.Duration
	// MaxRequests and MaxBytes close a window earlier: the Batches API's
	// 100,000 requests and 256 MB, less headroom for the batch's own JSON.
	// If zero, 100,000 and 240 MB.
	MaxRequests int
	MaxBytes    int64
	// Retention is how long results stay readable. If zero, 29 days.
	Retention time.Duration
	// PollInterval is how often batches in progress are polled, lost
	// creates reconciled and webhooks delivered. If zero, 30 s.
	PollInterval time.Duration
	// Upstream is the API's base URL; Client calls it (if nil, a client of
	// its own).
	Upstream *url.URL
	Client   *http.Client
	// WebhookClient delivers webhooks. If nil, a client with a 10 s
	// timeout that follows no redirect: a receiver's 3xx is a failed
	// delivery, retried, not a way to make sluice post a result to an
	// address the submitter did not name.
	WebhookClient *http.Client
	// MaxLongPolls is how many GET /v1/bulk/messages/{id}?wait= polls may
	// wait at once, all keys together; past it a poll is answered 529
	// with retry-after at once. Each waiting poll holds a connection, a
	// goroutine and a store read a second, and nothing else bounds them.
	// If zero, 1,024.
	MaxLongPolls int
	// MaxPendingBytes is how many bytes of submissions one key (one
	// credential, or one sluice key under inbound keys) may have stored
	// that have not ended (queued, or in a batch in progress):
	// BULK_MAX_PENDING_MB. Past it a submission is answered 429 until some
	// end. It is counted in the store, so it holds across restarts and
	// replicas. Without it one key could fill the disk in seconds. If
	// zero, 1 GB.
	MaxPendingBytes int64
	// Logger, if nil, slog.Default().
	Logger *slog.Logger
	// Spend counts the spend of succeeded results, at the batch price;
	// if nil, they are priced by the list and counted nowhere.
	Spend *spend.Ledger
	// Budgets bind bulk work: of the tenant bulk (SpendTenant) or of its
	// key, by the first 16 hex digits of its owner's hash, as Spend
	// counts them. A submission is refused when they are spent, or when
	// its estimated cost does not fit in what they have left; an accepted
	// one holds its estimate against them until it ends (its result's
	// spend counted then). A person signed in through the identity
	// provider (budget.MemberFrom the request's context) is also held to
	// their own budget of each of their groups' budgets: refused past it,
	// their submission's estimate held against it until it ends; its
	// result is counted under the tenant bulk, not theirs. Nil: none.
	Budgets Budgets
}

// Budgets say whether a tenant or a key has spent its budget, and hold
// accepted work's estimated cost against it (package budget's Set is
// one).
type Budgets interface {
	// Over is the error to answer with when tenant's or key's budget is
	// spent, or nil.
	Over(tenant, key string) *apierror.Error
	// OverMember is Over for a member's own budgets of their groups'.
	OverMember(m budget.Member) *apierror.Error
	// Reserve holds e against tenant's and key's budgets and m's own
	// budgets of their groups', or is the error to answer with when it
	// does not fit.
	Reserve(tenant, key string, m budget.Member, e budget.Estimate) (*budget.Reservation, *apierror.Error)
}

// Service is the bulk endpoint: its HTTP handler, its store and the
// goroutines that move submissions through (the group-commit writer, the
// submitter, the poller, the webhook deliverer). Close stops them.
type Service struct {
	cfg    Config
	store  *Store
	seal   *sealer
	api    *batchesAPI
	hooks  *http.Client
	log    *slog.Logger
	m      *Metrics
	owner  string // this replica, in batches' leases
	lease  time.Duration
	budget *byteQuota

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	writes chan *write // to the group-commit writer

	mu       sync.Mutex // guards the fields below
	windows  map[string]*window.Window[string]
	inWindow map[string]bool     // ids in a local window
	jobs     []job               // flushed waves for the submitter
	creating map[string]bool     // local batches whose create is under way
	waits    map[string]*waitFor // long polls by request id
	// holds are the budget reservations of requests accepted here and
	// not yet ended, by request id (Config.Budgets).
	holds map[string]*budget.Reservation

	pollReads atomic.Int64        // store reads of GET /v1/bulk/messages/{id}, for the tests
	longPolls atomic.Int64        // GET ?wait= polls waiting now (Config.MaxLongPolls)
	inFlight  int                 // batches created and not ended, at the last poll
	sizes     map[string]int64    // bytes of the ids in windows
	kick      chan struct{}       // wakes the submitter
	first     bool                // the first sweep (at start) has not run
	pending   map[string]struct{} // keys whose window must flush at once after a sweep
}

// job is one flushed wave: one credential's requests for one batch.
type job struct {
	keyHash string
	ids     []string
}

// write is one submission waiting for the group commit.
type write struct {
	req  *newRequest
	done chan error
}

// New opens the store, recovers what a previous run left (queued
// requests back into windows, batches to poll or reconcile) and starts
// the service.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.DataDir == "" {
		cfg.DataDir = "data"
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 5 * time.Minute
	}
	if cfg.MaxRequests <= 0 || cfg.MaxRequests > 100_000 {
		cfg.MaxRequests = 100_000
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 240 << 20
	}
	if cfg.Retention <= 0 {
		cfg.Retention = 29 * 24 * time.Hour
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 30 * time.Second
	}
	if cfg.Upstream == nil {
		return nil, errors.New("bulk: no upstream URL")
	}
	if len(cfg.KeyWebhooks) > 0 && cfg.WebhookSecret == "" {
		return nil, errors.New("bulk: BULK_KEY_WEBHOOKS needs BULK_WEBHOOK_SECRET to sign the deliveries with; set one")
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Minute}
	}
	if cfg.WebhookClient == nil {
		cfg.WebhookClient = &http.Client{Timeout: 10 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if cfg.MaxLongPolls <= 0 {
		cfg.MaxLongPolls = 1024
	}
	if cfg.MaxPendingBytes <= 0 {
		cfg.MaxPendingBytes = 1 << 30
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	store, err := OpenStore(ctx, cfg.Store, cfg.DataDir)
	if err != nil {
		return nil, err
	}
	seal, err := newSealer(cfg.Secret, cfg.DataDir)
	if err != nil {
		store.Close()
		return nil, err
	}
	s := &Service{cfg: cfg, store: store, seal: seal, log: cfg.Logger, hooks: cfg.WebhookClient,
		api:   &batchesAPI{base: strings.TrimSuffix(cfg.Upstream.String(), "/"), client: cfg.Client},
		owner: randomHex(8), lease: min(max(3*cfg.PollInterval, time.Second), 5*time.Minute),
		budget: &byteQuota{limit: 256 << 20}, writes: make(chan *write, 4096),
		windows: map[string]*window.Window[string]{}, inWindow: map[string]bool{}, creating: map[string]bool{},
		waits: map[string]*waitFor{}, holds: map[string]*budget.Reservation{}, sizes: map[string]int64{}, kick: make(chan struct{}, 1), first: true,
		pending: map[string]struct{}{}}
	s.m = newMetrics(s)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	// Queued requests of a previous run go back into windows before any
	// new submission is taken.
	if err := s.sweep(ctx); err != nil {
		store.Close()
		return nil, err
	}
	s.wg.Add(4)
	go s.writer()
	go s.submitter()
	go s.poller()
	go s.deliverer()
	return s, nil
}

// Close stops taking submissions and stops the goroutines; a batch whose
// create is under way is left to the next start's reconciliation. Open
// windows are not flushed: their requests are stored and a restart puts
// them back in windows.
func (s *Service) Close() {
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	ws := make([]*window.Window[string], 0, len(s.windows))
	for _, w := range s.windows {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	for _, w := range ws {
		w.Close() // their flushes find the service stopped and drop the ids
	}
	s.store.Close()
}

// Store is the service's store (for the page and tests).
func (s *Service) Store() *Store { return s.store }

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newID returns prefix and an id that sorts by creation time.
func newID(prefix string) string {
	return fmt.Sprintf("%s%016x%s", prefix, time.Now().UnixNano(), randomHex(4))
}

// waitFor is what the long polls of one request wait on: ch is closed
// when it may have ended; n counts the polls.
type waitFor struct {
	ch chan struct{}
	n  int
}

// watch returns a channel closed when request id may have ended (see
// ended), and release, to call once the poll stops watching. Only the
// polls of that request are woken: a change to another client's request
// costs a poll nothing.
func (s *Service) watch(id string) (<-chan struct{}, func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	wf := s.waits[id]
	if wf == nil {
		wf = &waitFor{ch: make(chan struct{})}
		s.waits[id] = wf
	}
	wf.n++
	return wf.ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if wf.n--; wf.n == 0 && s.waits[id] == wf {
			delete(s.waits, id)
		}
	}
}

// ended wakes the long polls of the requests ids, which may have ended,
// and gives back their budget holds: a result's spend has been counted
// (countResult) before its request is stored as ended, and a request
// that failed or was cancelled spends nothing more.
func (s *Service) ended(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if wf := s.waits[id]; wf != nil {
			close(wf.ch)
			delete(s.waits, id)
		}
		if h := s.holds[id]; h != nil {
			h.Release()
			delete(s.holds, id)
		}
	}
}
