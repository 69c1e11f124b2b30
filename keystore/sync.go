package keystore

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/budget"
)

// PollEvery is how often each replica asks the store whether the keys or
// budgets changed. A change made through any replica is in force on every
// other within PollEvery and one read of the store (a revoked key is
// refused by then); on the replica that made it at once.
const PollEvery = time.Second

// Apply is what a replica does with the store's keys and budgets: put
// them in force in place of the last ones. It is called with every key,
// revoked ones too (Key.Revoked), and every budget as a budget.Spec.
type Apply func(keys []Key, budgets []budget.Spec)

// Sync takes the store's keys and budgets into force: once at Start,
// then whenever Version moves (read every PollEvery) or Now is called.
type Sync struct {
	store Store
	apply Apply
	log   *slog.Logger

	mu      sync.Mutex // one read and apply at a time
	version int64
	loaded  bool
	failing bool

	quit chan struct{}
	done chan struct{}
	once sync.Once
}

// Start reads the store and applies it, and fails if it cannot (a
// replica must not serve without its keys); then it polls until Stop.
func Start(s Store, apply Apply, log *slog.Logger) (*Sync, error) {
	if log == nil {
		log = slog.Default()
	}
	y := &Sync{store: s, apply: apply, log: log, quit: make(chan struct{}), done: make(chan struct{})}
	if err := y.Now(context.Background()); err != nil {
		return nil, err
	}
	go y.run()
	return y, nil
}

func (y *Sync) run() {
	defer close(y.done)
	t := time.NewTicker(PollEvery)
	defer t.Stop()
	for {
		select {
		case <-y.quit:
			return
		case <-t.C:
		}
		if err := y.Now(context.Background()); err != nil {
			y.mu.Lock()
			first := !y.failing
			y.failing = true
			y.mu.Unlock()
			if first {
				y.log.Error("keys store: reading the keys and budgets failed; the last ones read stay in force until it succeeds", "err", err)
			}
		}
	}
}

// Stop ends the polling.
func (y *Sync) Stop() {
	y.once.Do(func() { close(y.quit); <-y.done })
}

// Now reads the store, if its version moved, and applies what it holds.
func (y *Sync) Now(ctx context.Context) error {
	y.mu.Lock()
	defer y.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := y.store.Version(ctx)
	if err != nil {
		return err
	}
	if y.loaded && v == y.version {
		return nil
	}
	keys, err := y.store.Keys(ctx)
	if err != nil {
		return err
	}
	bs, err := y.store.Budgets(ctx)
	if err != nil {
		return err
	}
	specs := make([]budget.Spec, 0, len(bs))
	for _, b := range bs {
		sp, err := b.Spec(keys)
		if err != nil {
			// Checked when it was put; a key it named may have gone since.
			y.log.Warn("keys store: a budget binds nothing and is not in force", "budget", b.Name, "err", err)
			continue
		}
		specs = append(specs, sp)
	}
	y.apply(keys, specs)
	if y.failing {
		y.log.Info("keys store: read again; its keys and budgets are in force")
	}
	y.version, y.loaded, y.failing = v, true, false
	return nil
}

// Spec is b as a budget.Spec, checked, with a key named by its sluice key's
// name (among keys) turned into the key's short hash.
func (b Budget) Spec(keys []Key) (budget.Spec, error) {
	var tenant, key, group string
	switch b.Scope {
	case "tenant":
		tenant = b.Target
	case "group":
		group = b.Target
	case "key":
		key = b.Target
		for _, k := range keys {
			if k.Name == b.Target {
				key = strings.ToLower(k.SHA256)
			}
		}
	default:
		return budget.Spec{}, fmt.Errorf("scope %q: want %s or %s", b.Scope, strings.Join(Scopes[:len(Scopes)-1], ", "), Scopes[len(Scopes)-1])
	}
	return b.Amount.Spec(b.Name, tenant, key, group)
}
