// Package keystore is the sluice keys and budgets the admin API changes
// live (INBOUND_KEYS_STORE), as the store the replicas share keeps them:
// the records, the Store a store implements (package spendstore, on
// SQLite or PostgreSQL), and Sync, which each replica runs to take every
// change into force within PollEvery. It imports no store driver, so that
// the proxy's library, which serves the admin API, links none.
package keystore

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/budget"
)

// Key is one sluice key as the store keeps it: by the SHA-256 of the key,
// never the key, with what the keys file's entry says of it.
type Key struct {
	Name          string   `json:"name"`
	SHA256        string   `json:"sha256"`
	Tenant        string   `json:"tenant,omitempty"`
	Weight        float64  `json:"weight,omitempty"`
	Class         string   `json:"class,omitempty"`
	MaxConcurrent int      `json:"max_concurrent,omitempty"`
	MaxWaiting    int      `json:"max_waiting,omitempty"`
	Models        []string `json:"models,omitempty"`
	Backends      []string `json:"backends,omitempty"`
	// Created and CreatedBy say when and by whom; Revoked, when not
	// zero, when it was revoked: a revoked key is kept, for the audit,
	// and refused.
	Created   time.Time `json:"created_at"`
	CreatedBy string    `json:"created_by"`
	Revoked   time.Time `json:"revoked_at,omitzero"`
}

// Budget is one budget as the store keeps it: its name, what it binds
// (Scope key, by the sluice key's name or short hash, tenant, or group,
// an identity provider's group whose members it binds each on their own) and its
// amount and period as a config file spells them.
type Budget struct {
	Name    string      `json:"name"`
	Scope   string      `json:"scope"` // key, tenant or group
	Target  string      `json:"target"`
	Amount  budget.File `json:"amount"`
	Updated time.Time   `json:"updated_at"`
}

// Scopes are what a Budget may bind.
var Scopes = []string{"key", "tenant", "group"}

// Change is one line of the audit: who changed what, when.
type Change struct {
	At time.Time `json:"at"`
	// Who is the admin API's caller as it named itself (X-Sluice-Actor;
	// the CLI sends the operator's login) and the address it came from.
	Who string `json:"who"`
	// Action is key.create, key.update, key.revoke, budget.put or
	// budget.delete; Target the key's or budget's name; Detail what was
	// set, as JSON (never a key: a key's record holds its hash).
	Action string `json:"action"`
	Target string `json:"target"`
	Detail string `json:"detail,omitempty"`
}

// Errors a Store answers with.
var (
	ErrExists   = errors.New("the name is taken")
	ErrNotFound = errors.New("no such name")
	ErrRevoked  = errors.New("the key is revoked")
)

// Store keeps the keys, the budgets and the audit. Every change bumps
// Version and writes its Change in the same transaction.
type Store interface {
	// Version is a number that grows with every change: a replica
	// reads the rest only when it moved.
	Version(ctx context.Context) (int64, error)
	Keys(ctx context.Context) ([]Key, error)
	CreateKey(ctx context.Context, k Key, c Change) error
	// UpdateKey applies edit to the key named name, unless it is
	// revoked, and stores the result.
	UpdateKey(ctx context.Context, name string, edit func(*Key) error, c Change) (Key, error)
	RevokeKey(ctx context.Context, name string, c Change) error
	Budgets(ctx context.Context) ([]Budget, error)
	// PutBudget creates or replaces the budget named b.Name; created
	// says which.
	PutBudget(ctx context.Context, b Budget, c Change) (created bool, err error)
	DeleteBudget(ctx context.Context, name string, c Change) error
	// Audit is the last limit changes, the newest first, before before
	// (0: from the newest) by their sequence number; each Change's
	// sequence number comes with it.
	Audit(ctx context.Context, limit int, before int64) ([]Numbered, error)
}

// Numbered is a Change with its place in the audit.
type Numbered struct {
	Seq int64 `json:"seq"`
	Change
}
