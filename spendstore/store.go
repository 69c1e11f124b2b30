// Package spendstore keeps the spend books: what each tenant, key and
// model spent in each quarter hour, in SQLite (DATA_DIR/spend.db, which
// survives a restart, or in memory). It hears every answer's spend from
// the ledger (it is a spend.Sink) into a table in memory, and writes that
// table in one transaction a second, off the request path; a write that
// fails keeps its spend in memory and is tried again, so that a store
// outage never blocks or fails a request. It answers the budgets' load at
// start (budget.Books) and the admin API's queries.
package spendstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	_ "modernc.org/sqlite" // the "sqlite" driver, no cgo

	"github.com/sluicehq/sluice/spend"
)

// Bucket is the books' grain. Every time zone's offset from UTC is a
// whole number of quarter hours, so a budget's period in any zone starts
// on a bucket's edge and the books can say what was spent since.
const Bucket = 15 * time.Minute

// FlushEvery is how often the spend heard is written.
const FlushEvery = time.Second

// Store is the books. Spent is safe for concurrent use and does no I/O.
type Store struct {
	db    *sql.DB
	where string
	log   *slog.Logger
	now   func() time.Time

	mu      sync.Mutex
	pending map[row]*amount
	// wmu orders a write against a read of the books and what is held:
	// a spend is in one or the other, never neither, for a reader.
	wmu sync.Mutex

	// failing is set while writes fail: the spend is held in memory.
	failing  atomic.Bool
	failures prometheus.Counter
	held     prometheus.GaugeFunc

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// row is one line of the books: a bucket's spend of a tenant, key and
// model.
type row struct {
	bucket             int64 // Unix seconds of the bucket's start
	tenant, key, model string
}

type amount struct {
	usd, estimated  float64
	tokens, answers int64
}

// Open opens the books: durable, dataDir/spend.db, kept across restarts
// (SPEND_STORE=sqlite); else an in-memory database, gone when sluice stops.
// It starts the writer; Close stops it after a last write.
func Open(durable bool, dataDir string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.Default()
	}
	var dsn, where string
	switch {
	case !durable:
		// One connection: each connection to :memory: is a database of
		// its own.
		dsn, where = ":memory:", "memory"
	default:
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("spend store: create DATA_DIR: %w", err)
		}
		where = filepath.Join(dataDir, "spend.db")
		// WAL: the admin API's reads go on beside the writer. NORMAL: a
		// power cut may lose the last second's write, which FlushEvery
		// already risks; a process crash loses nothing written.
		dsn = "file:" + where + "?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(10000)&_txlock=immediate"
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("spend store: open %s: %w", where, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1) // kept: an in-memory database lives as long as its connection
	s := &Store{db: db, where: where, log: log, now: time.Now, pending: map[row]*amount{}, stop: make(chan struct{}), done: make(chan struct{}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_spend_store_failures_total",
			Help: "Writes of the spend books that failed; their spend is held in memory and written when the store takes it."}),
	}
	s.held = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_spend_store_pending_rows",
		Help: "Rows of spend heard and not yet written to the books (a second's worth, or more while the store fails)."},
		func() float64 { s.mu.Lock(); defer s.mu.Unlock(); return float64(len(s.pending)) })
	if err := s.migrate(); err != nil {
		db.Close()
		return nil, err
	}
	go s.run()
	return s, nil
}

// schema is the books' table, version 1 (PRAGMA user_version).
const schema = `
CREATE TABLE IF NOT EXISTS spend (
	bucket INTEGER NOT NULL,
	tenant TEXT NOT NULL,
	key TEXT NOT NULL,
	model TEXT NOT NULL,
	usd REAL NOT NULL,
	estimated_usd REAL NOT NULL,
	tokens INTEGER NOT NULL,
	answers INTEGER NOT NULL,
	PRIMARY KEY (bucket, tenant, key, model)
);
CREATE INDEX IF NOT EXISTS spend_by_tenant ON spend (tenant, bucket);
CREATE INDEX IF NOT EXISTS spend_by_key ON spend (key, bucket);
PRAGMA user_version = 1;`

func (s *Store) migrate() error {
	var v int
	if err := s.db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("spend store %s: %w", s.where, err)
	}
	if v > 1 {
		return fmt.Errorf("spend store %s: schema version %d is newer than this sluice knows (1); run the newer sluice, or move the file aside", s.where, v)
	}
	if _, err := s.db.Exec(schema); err != nil {
		return fmt.Errorf("spend store %s: create the schema: %w", s.where, err)
	}
	return nil
}

// Where names the store for logs: its file, or memory.
func (s *Store) Where() string { return s.where }

// Durable says the books survive a restart.
func (s *Store) Durable() bool { return s.where != "memory" }

// Failing says the last write failed: the spend since is held in memory
// (and budgets hold from memory).
func (s *Store) Failing() bool { return s.failing.Load() }

// Spent adds e to the quarter hour it is heard in. No I/O: the writer
// takes it.
func (s *Store) Spent(e spend.Entry) {
	now := s.now()
	k := row{bucket: now.Truncate(Bucket).Unix(), tenant: e.Tenant, key: e.Inbound, model: e.Model}
	s.mu.Lock()
	a := s.pending[k]
	if a == nil {
		a = &amount{}
		s.pending[k] = a
	}
	a.usd += e.USD
	a.tokens += e.Tokens
	a.answers++
	if e.Estimated {
		a.estimated += e.USD
	}
	s.mu.Unlock()
}

func (s *Store) run() {
	defer close(s.done)
	t := time.NewTicker(FlushEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Flush()
		}
	}
}

// Flush writes what was heard since the last write, in one transaction.
// On failure it is kept, to be written with the next.
func (s *Store) Flush() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	batch := s.pending
	s.pending = map[row]*amount{}
	s.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	err := s.write(batch)
	if err == nil {
		if s.failing.Swap(false) {
			s.log.Info("spend store: writing again; the spend held in memory is written", "store", s.where)
		}
		return nil
	}
	s.failures.Inc()
	if !s.failing.Swap(true) {
		s.log.Error("spend store: a write failed; spend is held in memory and budgets hold from it until the store takes it", "store", s.where, "err", err)
	}
	s.mu.Lock()
	for k, a := range batch {
		p := s.pending[k]
		if p == nil {
			s.pending[k] = a
			continue
		}
		p.usd, p.estimated, p.tokens, p.answers = p.usd+a.usd, p.estimated+a.estimated, p.tokens+a.tokens, p.answers+a.answers
	}
	s.mu.Unlock()
	return err
}

func (s *Store) write(batch map[row]*amount) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	st, err := tx.PrepareContext(ctx, `INSERT INTO spend (bucket, tenant, key, model, usd, estimated_usd, tokens, answers)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (bucket, tenant, key, model) DO UPDATE SET usd = usd + excluded.usd,
			estimated_usd = estimated_usd + excluded.estimated_usd, tokens = tokens + excluded.tokens, answers = answers + excluded.answers`)
	if err != nil {
		return err
	}
	defer st.Close()
	for k, a := range batch {
		if _, err := st.ExecContext(ctx, k.bucket, k.tenant, k.key, k.model, a.usd, a.estimated, a.tokens, a.answers); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Close writes what is left and closes the store. Call it once the proxy
// has drained, so that the last answers are in the books.
func (s *Store) Close() error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		err = errors.Join(s.Flush(), s.db.Close())
	})
	return err
}

// Collectors are the store's metrics.
func (s *Store) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.failures, s.held}
}

// Since sums what tenant (or, when tenant is "", key) spent from from on:
// the books and what is not written yet. from is on a bucket's edge (a
// budget's period start: every zone's midnight is).
func (s *Store) Since(from time.Time, tenant, key string) (usd float64, tokens int64, err error) {
	col, who := "tenant", tenant
	if tenant == "" {
		col, who = "key", key
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	err = s.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(usd), 0), COALESCE(SUM(tokens), 0) FROM spend WHERE `+col+` = ? AND bucket >= ?`,
		who, from.Unix()).Scan(&usd, &tokens)
	if err != nil {
		return 0, 0, fmt.Errorf("spend store %s: %w", s.where, err)
	}
	s.mu.Lock()
	for k, a := range s.pending {
		if k.bucket >= from.Unix() && (tenant != "" && k.tenant == tenant || tenant == "" && k.key == key) {
			usd, tokens = usd+a.usd, tokens+a.tokens
		}
	}
	s.mu.Unlock()
	return usd, tokens, nil
}
