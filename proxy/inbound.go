package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/budget"

	"github.com/sluicehq/sluice/internal/regfile"
	"github.com/sluicehq/sluice/oidcauth"
	"github.com/sluicehq/sluice/request"
)

// Inbound keys (INBOUND_KEYS_FILE): sluice holds the upstream API key and
// its clients present sluice keys of their own. Each sluice key is known
// only by its SHA-256, so the keys file can be read by whoever deploys
// sluice without giving anyone a usable key. The set of keys and the held
// key are swapped in whole on Reload (SIGHUP): a request sees the old set
// or the new one, never a mix, and nothing waits for a reload.
type Inbound struct {
	keysFile, upstreamKeyFile string
	envKey                    string             // ANTHROPIC_API_KEY, when no UPSTREAM_KEY_FILE
	tokens                    *oidcauth.Verifier // identity-provider tokens (inboundtokens.go); nil: none
	set                       atomic.Pointer[keySet]
	// swap orders the writers of set (Reload, UseStored); stored are the
	// keys store's keys in force (inboundstore.go), under swap.
	swap   sync.Mutex
	stored []inboundKey
}

// keySet is one loading of the keys file and the held key.
type keySet struct {
	// keys are the keys file's, then the keys store's; the first files
	// of them the file's.
	keys  []inboundKey
	files int
	// budgets are the keys' own budgets (a key's "budget" member).
	budgets []budget.Spec
	// upstream is the key sluice sends; upstreamHash its short hash
	// (request.Tenant's), what the descriptor's Key carries.
	upstream, upstreamHash string
}

type inboundKey struct {
	sum [sha256.Size]byte
	rec *request.Inbound
}

// InboundOptions say where the keys come from.
type InboundOptions struct {
	// KeysFile is the JSON file of sluice keys (INBOUND_KEYS_FILE).
	KeysFile string
	// UpstreamKeyFile holds the upstream API key (UPSTREAM_KEY_FILE); if
	// empty, UpstreamKey is it.
	UpstreamKeyFile string
	// UpstreamKey is the upstream API key (ANTHROPIC_API_KEY), used when
	// UpstreamKeyFile is empty.
	UpstreamKey string
	// Tokens checks identity-provider tokens (OIDC_ISSUER); nil: none.
	// With it KeysFile may be empty: no sluice key.
	Tokens *oidcauth.Verifier
}

// LoadInbound reads the keys file and the upstream key; it fails when
// either cannot be read or is malformed, or when there is no upstream key.
func LoadInbound(o InboundOptions) (*Inbound, error) {
	in := &Inbound{keysFile: o.KeysFile, upstreamKeyFile: o.UpstreamKeyFile, envKey: o.UpstreamKey, tokens: o.Tokens}
	set, err := in.load()
	if err != nil {
		return nil, err
	}
	in.set.Store(set)
	return in, nil
}

// ErrHeldKeyKept is Reload's error when the keys file was read and is in
// force, but UPSTREAM_KEY_FILE could not be: the previous upstream key
// stays.
var ErrHeldKeyKept = errors.New("the keys file is reloaded, but the upstream key file is not")

// Reload reads both files again and, if they are good, swaps them in; if
// the keys file is not, the previous keys stay in force and the error says
// why. A keys file that loads is swapped in even when the upstream key
// file does not (ErrHeldKeyKept): a key revoked must not stay in force for
// a fault in another file.
func (in *Inbound) Reload() error {
	up, upErr := in.upstreamKey()
	if upErr != nil {
		up = in.set.Load().upstream
	}
	set, err := in.loadKeys(up)
	if err != nil {
		return err
	}
	in.swap.Lock()
	set.keys = append(set.keys, in.storedBeside(set)...)
	in.set.Store(set)
	in.swap.Unlock()
	if upErr != nil {
		return fmt.Errorf("%w: %w", ErrHeldKeyKept, upErr)
	}
	return nil
}

// Budgets are the budgets the keys file gives its keys, as loaded last.
// They are read when sluice starts: a reload that changes them keeps the
// budgets in force until a restart (see BudgetsChanged).
func (in *Inbound) Budgets() []budget.Spec { return in.set.Load().budgets }

// Len is how many sluice keys are in force.
func (in *Inbound) Len() int { return len(in.set.Load().keys) }

// keysFileEntry is one key of the keys file.
type keysFileEntry struct {
	Name          string   `json:"name"`
	SHA256        string   `json:"sha256"` // hex SHA-256 of the key: never the key itself
	Tenant        string   `json:"tenant"`
	Weight        float64  `json:"weight"`
	Class         string   `json:"class"`
	MaxConcurrent int      `json:"max_concurrent"`
	MaxWaiting    int      `json:"max_waiting"`
	Models        []string `json:"models"`
	// Backends limits the key's requests to these backends of the
	// config file, by name (docs/routing.md); absent: any.
	Backends []string `json:"backends"`
	// Budget caps what the key spends: usd or tokens, period, time_zone,
	// warn_at, as a config file's [[budgets]] table (docs/spend.md).
	Budget *budget.File `json:"budget"`
}

// maxKeysFile bounds what is read of the keys file and the upstream key
// file: a keys file of 100,000 keys is under 20 MB.
const maxKeysFile = 32 << 20

func (in *Inbound) load() (*keySet, error) {
	up, err := in.upstreamKey()
	if err != nil {
		return nil, err
	}
	return in.loadKeys(up)
}

// upstreamKey reads the key sluice holds: UPSTREAM_KEY_FILE's, or the
// environment's.
func (in *Inbound) upstreamKey() (string, error) {
	up := in.envKey
	if in.upstreamKeyFile != "" {
		b, err := readSmall(in.upstreamKeyFile)
		if err != nil {
			return "", fmt.Errorf("UPSTREAM_KEY_FILE: %w", err)
		}
		up = strings.TrimSpace(string(b))
	}
	if up == "" {
		return "", errors.New("inbound keys need an upstream API key for sluice to hold: set ANTHROPIC_API_KEY, or UPSTREAM_KEY_FILE to a file holding it")
	}
	if strings.ContainsFunc(up, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return "", errors.New("the upstream API key holds a control character (a line break inside UPSTREAM_KEY_FILE?); it must be one line")
	}
	return up, nil
}

// loadKeys reads the keys file, with up the upstream key it goes with.
func (in *Inbound) loadKeys(up string) (*keySet, error) {
	set := &keySet{upstream: up, upstreamHash: request.Tenant(http.Header{"X-Api-Key": {up}})}
	if in.keysFile == "" { // the keys store's (INBOUND_KEYS_STORE) or identity-provider tokens only
		return set, nil
	}
	b, err := readSmall(in.keysFile)
	if err != nil {
		return nil, fmt.Errorf("INBOUND_KEYS_FILE: %w", err)
	}
	var file struct {
		Keys []keysFileEntry `json:"keys"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields() // a "key" member would be a key in the clear
	if err := dec.Decode(&file); err != nil {
		return nil, fmt.Errorf("INBOUND_KEYS_FILE %s: %w; expected {\"keys\":[{\"name\":...,\"sha256\":...}]}", in.keysFile, err)
	}
	names := map[string]bool{}
	sums := map[[sha256.Size]byte]bool{}
	for i, e := range file.Keys {
		k, err := e.key()
		if err == nil && names[e.Name] {
			err = errors.New("the name is used twice")
		}
		if err == nil && sums[k.sum] {
			err = errors.New("the same key is listed twice")
		}
		if err == nil && e.Budget != nil {
			var sp budget.Spec
			if sp, err = e.Budget.Spec("", "", k.rec.Hash, ""); err == nil {
				sp.Name = "key:" + e.Name + ":" + sp.Period.String() + ":" + sp.Unit.String()
				set.budgets = append(set.budgets, sp)
			} else {
				err = fmt.Errorf("budget: %w", err)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("INBOUND_KEYS_FILE %s: key %d (%q): %w", in.keysFile, i+1, e.Name, err)
		}
		names[e.Name], sums[k.sum] = true, true
		set.keys = append(set.keys, k)
	}
	set.files = len(set.keys)
	return set, nil
}

func (e keysFileEntry) key() (inboundKey, error) {
	var k inboundKey
	switch {
	case e.Name == "":
		return k, errors.New("no name")
	case e.Weight < 0 || e.MaxConcurrent < 0 || e.MaxWaiting < 0:
		return k, errors.New("weight, max_concurrent and max_waiting must not be negative")
	case e.Tenant != "" && !printableName(e.Tenant):
		// A tenant is a label of the metrics, a column of the books and
		// a word of the log: a blank, a control character or a novel
		// would break or spoof them.
		return k, fmt.Errorf("tenant: at most %d bytes of printable UTF-8, not blank (no control characters, no line breaks)", request.MaxUserID)
	}
	class, err := request.ParseClass(e.Class)
	if err != nil {
		return k, fmt.Errorf("class %q: %w", e.Class, err)
	}
	sum, err := hex.DecodeString(e.SHA256)
	if err != nil || len(sum) != sha256.Size {
		return k, errors.New("sha256 must be the 64 hex digits of the key's SHA-256 (sluice inbound-key prints one)")
	}
	copy(k.sum[:], sum)
	k.rec = &request.Inbound{Name: e.Name, Tenant: e.Tenant, Weight: e.Weight, Class: class,
		MaxConcurrent: e.MaxConcurrent, MaxWaiting: e.MaxWaiting, Models: e.Models, Backends: e.Backends, Hash: strings.ToLower(e.SHA256[:16])}
	return k, nil
}

// printableName says s can name a tenant: valid UTF-8 of at most
// request.MaxUserID bytes, not blank, without control characters.
func printableName(s string) bool {
	if len(s) > request.MaxUserID || !utf8.ValidString(s) || strings.TrimSpace(s) == "" {
		return false
	}
	return !strings.ContainsFunc(s, unicode.IsControl)
}

// readSmall reads a keys file, only if it is a regular file: a named pipe
// would hold the reload (and the shutdown after it) waiting for a writer.
func readSmall(path string) ([]byte, error) { return regfile.ReadFile(path, maxKeysFile) }

// match finds the key whose hash is cred's. Every key is compared, each
// in constant time, so the time taken says nothing of which hash came
// close.
func (s *keySet) match(cred string) *request.Inbound {
	sum := sha256.Sum256([]byte(cred))
	var found *request.Inbound
	for i := range s.keys {
		if subtle.ConstantTimeCompare(sum[:], s.keys[i].sum[:]) == 1 {
			found = s.keys[i].rec
		}
	}
	return found
}

// presented is the credential a client sends, as the SDKs send it: in
// x-api-key, or as an Authorization bearer token.
func presented(h http.Header) string {
	if k := h.Get("X-Api-Key"); k != "" {
		return k
	}
	auth := h.Get("Authorization")
	if len(auth) > len("Bearer ") && strings.EqualFold(auth[:len("Bearer ")], "Bearer ") {
		return strings.TrimSpace(auth[len("Bearer "):])
	}
	return ""
}

var (
	errNoInboundKey = &apierror.Error{Status: http.StatusUnauthorized, Type: "authentication_error",
		Message: "this sluice holds the API key itself and takes sluice keys: send yours in the x-api-key header (or as Authorization: Bearer); ask whoever runs this sluice for one"}
	errBadInboundKey = &apierror.Error{Status: http.StatusUnauthorized, Type: "authentication_error",
		Message: "the sluice key sent is not valid (unknown, or revoked): check it, or ask whoever runs this sluice for a new one; this sluice takes no Anthropic API keys"}
)

type inboundCtxKey struct{}

// inboundOf is the record of the sluice key r presented; nil when inbound
// keys are off.
func inboundOf(r *http.Request) *request.Inbound {
	rec, _ := r.Context().Value(inboundCtxKey{}).(*request.Inbound)
	return rec
}

// RequireKey wraps a handler of an upstream path so that, with inbound
// keys, only a request with a valid sluice key reaches it, with that key
// taken off and the held upstream key put on, its record in the request
// context (and so in the descriptor), and its allowed models enforced
// where sluice can tell the model. Without inbound keys it returns h.
func (p *Proxy) RequireKey(h http.Handler) http.Handler {
	if p.inbound == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		set := p.inbound.set.Load()
		cred := presented(r.Header)
		if cred == "" {
			apierror.WriteSluice(w, p.inbound.errNoCredential())
			return
		}
		rec, caller := set.match(cred), ""
		if rec == nil && p.inbound.tokens != nil && looksLikeJWT(cred) {
			var aerr *apierror.Error
			if rec, caller, aerr = p.inbound.checkToken(r.Context(), cred); aerr != nil {
				apierror.WriteSluice(w, aerr)
				return
			}
		}
		if rec == nil {
			apierror.WriteSluice(w, errBadInboundKey)
			return
		}
		// The client's key goes no further; the held key goes in its place
		// (as x-api-key, whichever header the client used).
		r.Header.Del("Authorization")
		r.Header.Set("X-Api-Key", set.upstream)
		// The caller is the sluice key, by its hash (as the keys file
		// names it): what the client stores with sluice (bulk requests)
		// is its own, not every sluice key's.
		if caller == "" {
			sum := sha256.Sum256([]byte(cred))
			caller = "sluice-key:" + hex.EncodeToString(sum[:])
		}
		ctx := request.WithCaller(r.Context(), caller)
		r = r.WithContext(context.WithValue(ctx, inboundCtxKey{}, rec))
		if rec.Models != nil {
			release, aerr := p.checkModels(w, r, rec)
			if aerr != nil {
				if aerr != errClientGone {
					apierror.WriteSluice(w, aerr)
				}
				return
			}
			defer release()
		}
		h.ServeHTTP(w, r)
	})
}

// allowsModel reports whether rec may call model: a name in its list, or a
// list entry ending in * that model starts with.
func allowsModel(rec *request.Inbound, model string) bool {
	if rec == nil || rec.Models == nil {
		return true
	}
	for _, m := range rec.Models {
		if m == model || strings.HasSuffix(m, "*") && strings.HasPrefix(model, m[:len(m)-1]) {
			return true
		}
	}
	return false
}

func errModelNotAllowed(rec *request.Inbound, model string) *apierror.Error {
	return &apierror.Error{Status: http.StatusForbidden, Type: "permission_error",
		Message: fmt.Sprintf("%s may not call model %q; it may call: %s; use one of those, or ask whoever runs this sluice to allow it",
			holder(rec), model, strings.Join(rec.Models, ", "))}
}
