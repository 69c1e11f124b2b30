// Package spendstore keeps the spend books: what each tenant, key and
// model spent in each quarter hour, in SQLite (DATA_DIR/spend.db, which
// survives a restart, or in memory) or in PostgreSQL, which several
// replicas share. It hears every answer's spend from the ledger (it is a
// spend.Sink) into a table in memory, and writes that table in one
// transaction a second, off the request path; a write that fails keeps
// its spend in memory and is tried again, so that a store outage never
// blocks or fails a request. It answers the budgets' load at start
// (budget.Books), on PostgreSQL what the other replicas spent
// (budget.Shared), and the admin API's queries.
package spendstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	"github.com/prometheus/client_golang/prometheus"
	_ "modernc.org/sqlite" // the "sqlite" driver, no cgo

	"github.com/sluicehq/sluice/internal/sqlq"
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
	// pg: the books are PostgreSQL's, shared by replicas; each writes its
	// rows under its own replica name, so that what the others spent is
	// the rows not its own.
	pg      bool
	replica string
	dsn     string // a secret: only to cut it out of an error's text

	mu      sync.Mutex
	pending map[row]*amount
	// unsent is a write that failed, tried again as it was (its seq the
	// same) before anything newer: on PostgreSQL a commit whose answer
	// was lost is then recognised by its seq and not counted twice.
	// Under wmu.
	unsent *batch
	seq    int64
	// wmu orders a write against a read of the books and what is held:
	// a spend is in one or the other, never neither, for a reader.
	wmu sync.Mutex

	// failing is set while writes fail: the spend is held in memory.
	// readFailing while the other replicas' spend cannot be read:
	// budgets hold from what this replica counted and the last read.
	failing     atomic.Bool
	readFailing atomic.Bool
	failures    prometheus.Counter
	held        prometheus.GaugeFunc

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

func (a *amount) add(b *amount) {
	a.usd, a.estimated, a.tokens, a.answers = a.usd+b.usd, a.estimated+b.estimated, a.tokens+b.tokens, a.answers+b.answers
}

// batch is one write: its rows and its number among this replica's.
type batch struct {
	seq  int64
	rows map[row]*amount
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
		if err := sqlq.PrivateFile(where); err != nil {
			return nil, fmt.Errorf("spend store: %w", err)
		}
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
	s := newStore(db, where, log)
	if err := s.migrate(); err != nil {
		db.Close()
		return nil, err
	}
	go s.run()
	return s, nil
}

// OpenPostgres opens the books in the PostgreSQL at dsn (a postgres:// or
// postgresql:// URL, a secret: it is never logged nor put in an error),
// shared with every replica given the same: each writes its own rows, and
// Others reads what the rest spent. It starts the writer; Close stops it
// after a last write.
func OpenPostgres(ctx context.Context, dsn string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.Default()
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("spend store: open PostgreSQL: %s", redact(err, dsn))
	}
	db.SetMaxOpenConns(4) // the writer, the budgets' reads, the admin API
	s := newStore(db, "postgresql", log)
	s.pg, s.replica, s.dsn = true, replicaName(), dsn
	if err := s.migratePostgres(ctx); err != nil {
		db.Close()
		return nil, errors.New(redact(err, dsn))
	}
	go s.run()
	return s, nil
}

func newStore(db *sql.DB, where string, log *slog.Logger) *Store {
	s := &Store{db: db, where: where, log: log, now: time.Now, pending: map[row]*amount{}, stop: make(chan struct{}), done: make(chan struct{}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_spend_store_failures_total",
			Help: "Writes of the spend books that failed; their spend is held in memory and written when the store takes it."}),
	}
	s.held = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_spend_store_pending_rows",
		Help: "Rows of spend heard and not yet written to the books (a second's worth, or more while the store fails)."},
		func() float64 {
			s.mu.Lock()
			defer s.mu.Unlock()
			n := len(s.pending)
			if u := s.unsent; u != nil {
				n += len(u.rows)
			}
			return float64(n)
		})
	return s
}

// replicaName names this process's rows in shared books: the host, the
// process and a random part, so that a restarted replica (the same host
// and maybe the same pid) writes rows of its own and counts the rows of
// its past life among the others'.
func replicaName() string {
	b := make([]byte, 4)
	rand.Read(b)
	host, _ := os.Hostname()
	return host + ":" + strconv.Itoa(os.Getpid()) + ":" + hex.EncodeToString(b)
}

// redact is err's text with the DSN, and its password, cut out.
func redact(err error, dsn string) string {
	msg := strings.ReplaceAll(err.Error(), dsn, "[SPEND_STORE]")
	if u, perr := url.Parse(dsn); perr == nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "[password]")
		}
	}
	return msg
}

// Where names the store for logs: its file, memory, or postgresql (never
// the DSN).
func (s *Store) Where() string { return s.where }

// Durable says the books survive a restart.
func (s *Store) Durable() bool { return s.where != "memory" }

// Shared says several replicas keep these books together (PostgreSQL).
func (s *Store) Shared() bool { return s.pg }

// Replica is the name this process's rows carry in shared books; "" when
// they are not shared.
func (s *Store) Replica() string { return s.replica }

// Failing says the last write failed, or the last read of the other
// replicas' spend: the spend since is held in memory, and budgets hold
// from what this replica counted.
func (s *Store) Failing() bool { return s.failing.Load() || s.readFailing.Load() }

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
// On failure it is kept, to be written as it was before anything newer.
func (s *Store) Flush() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.unsent != nil {
		if err := s.tryWrite(s.unsent); err != nil {
			return err
		}
		s.mu.Lock()
		s.unsent = nil
		s.mu.Unlock()
	}
	s.mu.Lock()
	b := &batch{rows: s.pending}
	s.pending = map[row]*amount{}
	if len(b.rows) == 0 {
		s.mu.Unlock()
		return nil
	}
	s.seq++
	b.seq = s.seq
	s.unsent = b // held, in the readers' sight, until written
	s.mu.Unlock()
	if err := s.tryWrite(b); err != nil {
		return err
	}
	s.mu.Lock()
	s.unsent = nil
	s.mu.Unlock()
	return nil
}

// tryWrite writes b, and says when the store starts and stops failing.
func (s *Store) tryWrite(b *batch) error {
	err := s.write(b)
	if err == nil {
		if s.failing.Swap(false) {
			s.log.Info("spend store: writing again; the spend held in memory is written", "store", s.where)
		}
		return nil
	}
	s.failures.Inc()
	if !s.failing.Swap(true) {
		s.log.Error("spend store: a write failed; spend is held in memory and budgets hold from it until the store takes it", "store", s.where, "err", s.errText(err))
	}
	return err
}

// errText is err's text for a log: a DSN a driver quoted is cut out.
func (s *Store) errText(err error) string {
	if s.dsn == "" {
		return err.Error()
	}
	return redact(err, s.dsn)
}

// upsert adds a row's amounts to what the books hold.
const upsert = `INSERT INTO spend (bucket, tenant, key, model, usd, estimated_usd, tokens, answers)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (bucket, tenant, key, model) DO UPDATE SET usd = spend.usd + excluded.usd,
		estimated_usd = spend.estimated_usd + excluded.estimated_usd, tokens = spend.tokens + excluded.tokens, answers = spend.answers + excluded.answers`

const pgUpsert = `INSERT INTO spend (bucket, tenant, key, model, usd, estimated_usd, tokens, answers, replica)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
	ON CONFLICT (bucket, tenant, key, model, replica) DO UPDATE SET usd = spend.usd + excluded.usd,
		estimated_usd = spend.estimated_usd + excluded.estimated_usd, tokens = spend.tokens + excluded.tokens, answers = spend.answers + excluded.answers`

func (s *Store) write(b *batch) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	q := upsert
	if s.pg {
		// This write's number, in the same transaction as its rows: a
		// write that committed though its answer was lost is found here
		// when it is tried again, and not added twice.
		res, err := tx.ExecContext(ctx, `INSERT INTO spend_writes (replica, seq, at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
			s.replica, b.seq, s.now().Unix())
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return nil // written already
		}
		// Only the last write of each replica is needed; a day keeps a
		// dead replica's.
		if _, err := tx.ExecContext(ctx, `DELETE FROM spend_writes WHERE (replica = $1 AND seq < $2) OR at < $3`,
			s.replica, b.seq, s.now().Add(-24*time.Hour).Unix()); err != nil {
			return err
		}
		q = pgUpsert
	}
	st, err := tx.PrepareContext(ctx, q)
	if err != nil {
		return err
	}
	defer st.Close()
	for k, a := range b.rows {
		args := []any{k.bucket, k.tenant, k.key, k.model, a.usd, a.estimated, a.tokens, a.answers}
		if s.pg {
			args = append(args, s.replica)
		}
		if _, err := st.ExecContext(ctx, args...); err != nil {
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
