package cacheaware

import (
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/request"
)

// claudeCode is the descriptor of a captured Claude Code request in
// testdata/clients (re-captured by SLUICE_RECAPTURE=1 go test ./clients
// -run Capture).
func claudeCode(t *testing.T, name string) *request.Descriptor {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "clients", name+".body"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := request.Parse(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &d
}

// Claude Code's first requests of two different tasks, with different
// attribution lines, in one wave: one leads, the other is held as its
// follower on the shared tools-and-identity prefix.
func TestCacheClaudeCodeTasksGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newCacheRig(t, dispatch.Config{MaxSize: 2, MaxWait: time.Hour, Timeout: time.Minute}, 2, &Release{})
		a, b := claudeCode(t, "claude-code-first"), claudeCode(t, "claude-code-first-other-task")
		outs := []<-chan outcome{
			r.send(t.Context(), "leader", a, beginAfter(time.Second)),
			r.send(t.Context(), "other task", b, sleepFor(time.Second)),
		}
		for _, o := range outs {
			<-o
		}
		synctest.Wait()
		r.wantStarts(t,
			cacheStart{"leader", 0, asLeader},
			cacheStart{"other task", time.Second, follower(CacheFollower, time.Second, ReleasedBegun)},
		)
	})
}
