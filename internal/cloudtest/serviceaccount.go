package cloudtest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
)

// ServiceAccount writes a service account key file whose token endpoint
// is a loopback server handing out the simulator's token; it returns the
// file and a count of token fetches.
func ServiceAccount(t testing.TB) (string, *atomic.Int64) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	var fetched atomic.Int64
	tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil || r.PostForm.Get("assertion") == "" {
			http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
			return
		}
		fetched.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": VertexToken, "token_type": "Bearer", "expires_in": 3600})
	}))
	t.Cleanup(tokens.Close)
	sa, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "sim-project", "private_key_id": "k1",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": "sluice@sim-project.iam.gserviceaccount.com", "client_id": "1",
		"token_uri": tokens.URL + "/token",
	})
	file := t.TempDir() + "/sa.json"
	if err := os.WriteFile(file, sa, 0o600); err != nil {
		t.Fatal(err)
	}
	return file, &fetched
}

// DefaultChains points the clouds' default credential chains at the
// simulator's test credentials and nowhere else (no shared files, no
// metadata server), for the rest of the test, and returns a Google
// service-account file whose token endpoint is on loopback.
func DefaultChains(t *testing.T) string {
	t.Setenv("AWS_ACCESS_KEY_ID", AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", SecretAccessKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	file, _ := ServiceAccount(t)
	return file
}
