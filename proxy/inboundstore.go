package proxy

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"

	"github.com/sluicehq/sluice/keystore"
)

// The keys store's keys (INBOUND_KEYS_STORE): the admin API creates and
// revokes them, every replica reads them (keystore.Sync) and puts them in
// force beside the keys file's. A request matches them as it matches the
// file's: the request path is the same.

// NewKey makes a new sluice key: the key, to be given to its holder once,
// and the hex SHA-256 that is all sluice keeps of it.
func NewKey() (key, sum string) {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	key = "sk-sluice-" + base64.RawURLEncoding.EncodeToString(b[:])
	s := sha256.Sum256([]byte(key))
	return key, hex.EncodeToString(s[:])
}

// UseStored puts keys, the keys store's, in force in place of the last
// ones, beside the keys file's: a revoked key (Revoked set) is refused
// from then on. A key named as one of the file's, or with the hash of
// one, is left out (the file's stays), and named in skipped.
func (in *Inbound) UseStored(keys []keystore.Key) (skipped []string) {
	var stored []inboundKey
	for _, k := range keys {
		if !k.Revoked.IsZero() {
			continue
		}
		e := keysFileEntry{Name: k.Name, SHA256: k.SHA256, Tenant: k.Tenant, Weight: k.Weight, Class: k.Class,
			MaxConcurrent: k.MaxConcurrent, MaxWaiting: k.MaxWaiting, Models: k.Models, Backends: k.Backends}
		ik, err := e.key()
		if err != nil { // checked when it was made: a store edited by hand
			skipped = append(skipped, k.Name)
			continue
		}
		stored = append(stored, ik)
	}
	in.swap.Lock()
	defer in.swap.Unlock()
	in.stored = stored
	cur := in.set.Load()
	next := *cur
	next.keys = append(cur.keys[:cur.files:cur.files], in.storedBeside(cur)...)
	for _, k := range stored {
		if !in.inSet(next.keys, k) {
			skipped = append(skipped, k.rec.Name)
		}
	}
	in.set.Store(&next)
	return skipped
}

// storedBeside is the stored keys that clash with none of set's file
// keys, by name or hash. Under in.swap.
func (in *Inbound) storedBeside(set *keySet) []inboundKey {
	var out []inboundKey
	for _, k := range in.stored {
		clash := false
		for _, f := range set.keys[:set.files] {
			if f.rec.Name == k.rec.Name || f.sum == k.sum {
				clash = true
				break
			}
		}
		if !clash {
			out = append(out, k)
		}
	}
	return out
}

func (in *Inbound) inSet(keys []inboundKey, k inboundKey) bool {
	for _, o := range keys {
		if o.rec == k.rec {
			return true
		}
	}
	return false
}

// FileKey is the short hash of the keys file's key named name; ok false
// when the file has none of that name.
func (in *Inbound) FileKey(name string) (hash string, ok bool) {
	if in == nil {
		return "", false
	}
	set := in.set.Load()
	for _, k := range set.keys[:set.files] {
		if k.rec.Name == name {
			return k.rec.Hash, true
		}
	}
	return "", false
}

// validKeyName says whether name may name a key or a budget in the store:
// it goes in URLs, logs and metric labels.
func validKeyName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	return strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._@:-") == ""
}
