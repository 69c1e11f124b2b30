package proxy

import (
	"os/exec"
	"strings"
	"testing"
)

// storeDrivers are the module paths of the database drivers sluice's
// stores use. The proxy's library links none: it asks its stores through
// interfaces (Books, keystore.Store) and cmd/sluice opens them.
var storeDrivers = []string{"github.com/jackc/pgx", "modernc.org/sqlite", "github.com/redis/go-redis", "github.com/lib/pq", "github.com/mattn/go-sqlite3"}

func TestProxyLinksNoStoreDriver(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/sluicehq/sluice/proxy").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 { // the proxy links net/http and more: a list this short was not read
		t.Fatalf("go list -deps gave %d packages: %s", len(deps), out)
	}
	for _, d := range deps {
		for _, drv := range storeDrivers {
			if strings.HasPrefix(d, drv) {
				t.Errorf("package proxy links the store driver %s: reach the store through an interface and open it in cmd/sluice", d)
			}
		}
	}
}
