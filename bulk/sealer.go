package bulk

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluicehq/sluice/internal/regfile"
)

// sealer encrypts submitters' credentials at rest with AES-256-GCM. The
// key is SHA-256 of BULK_SECRET, or 32 random bytes generated once into
// a 0600 file in the data directory.
type sealer struct{ aead cipher.AEAD }

// secretFile is the generated key's file in DATA_DIR.
const secretFile = "bulk.key"

func newSealer(secret, dataDir string) (*sealer, error) {
	var key []byte
	if secret != "" {
		k := sha256.Sum256([]byte(secret))
		key = k[:]
	} else {
		var err error
		if key, err = loadOrMakeKey(filepath.Join(dataDir, secretFile)); err != nil {
			return nil, err
		}
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("bulk: credential key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("bulk: credential key: %w", err)
	}
	return &sealer{aead: aead}, nil
}

func loadOrMakeKey(path string) ([]byte, error) {
	if b, err := regfile.ReadFile(path, 1<<10); err == nil {
		key, err := hex.DecodeString(strings.TrimSpace(string(b)))
		if err != nil || len(key) != 32 {
			return nil, fmt.Errorf("bulk: %s is not a 64-digit hex key; restore it, or set BULK_SECRET", path)
		}
		return key, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("bulk: read the credential key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("bulk: create DATA_DIR: %w", err)
	}
	key := make([]byte, 32)
	rand.Read(key)
	// O_EXCL: of two processes starting on one directory, one writes the
	// key and the other reads it.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return loadOrMakeKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("bulk: write the credential key: %w", err)
	}
	if _, err := f.WriteString(hex.EncodeToString(key) + "\n"); err != nil {
		f.Close()
		return nil, fmt.Errorf("bulk: write the credential key: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("bulk: write the credential key: %w", err)
	}
	return key, f.Close()
}

// seal encrypts plain with a fresh nonce, bound to keyHash (a sealed
// credential moved to another key's row does not open).
func (s *sealer) seal(plain []byte, keyHash string) []byte {
	nonce := make([]byte, s.aead.NonceSize())
	rand.Read(nonce)
	return s.aead.Seal(nonce, nonce, plain, []byte(keyHash))
}

func (s *sealer) open(sealed []byte, keyHash string) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("bulk: a sealed credential is too short")
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(keyHash))
	if err != nil {
		return nil, errors.New("bulk: a credential does not open with this key (BULK_SECRET or DATA_DIR/bulk.key changed?)")
	}
	return plain, nil
}
