package main

import (
	"log/slog"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/keystore"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/spendstore"
)

// syncKeys puts the keys store's keys and budgets (INBOUND_KEYS_STORE) in
// force now, beside the files' (cfg.Budgets: the config file's and the
// keys file's), and again whenever the store changes; it fails if the
// store cannot be read at start.
func syncKeys(cfg config.Config, log *slog.Logger, books *spendstore.Store, inbound *proxy.Inbound, budgets *budget.Set) (*keystore.Sync, error) {
	static := slices.Clip(cfg.Budgets)
	apply := func(keys []keystore.Key, specs []budget.Spec) {
		if skipped := inbound.UseStored(keys); len(skipped) > 0 {
			log.Warn("keys store: keys named as the keys file's (or with the hash of one) are not in force; the file's stay", "keys", strings.Join(skipped, ","))
		}
		if err := budgets.Replace(append(static, specs...), books); err != nil {
			log.Error("keys store: its budgets are not in force; the last ones stay", "err", err)
		}
	}
	y, err := keystore.Start(books, apply, log)
	if err != nil {
		return nil, err
	}
	log.Info("keys and budgets from the keys store", "store", books.Where(), "poll", keystore.PollEvery.String())
	return y, nil
}
