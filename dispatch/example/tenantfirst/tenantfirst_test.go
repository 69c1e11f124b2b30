package tenantfirst

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/request"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start is when a member's function began, and how long TenantFirst held
// it.
type start struct {
	name string
	at   time.Duration
	held time.Duration
}

// burst sends one wave of members, by tenant and name, through a
// scheduler released by p; each one's function is fn. It returns when
// every member has ended, with who started when, by time then name.
func burst(t *testing.T, p *TenantFirst, fn func(name string, m *dispatch.Member) error, who ...[2]string) []start {
	t.Helper()
	g, err := gate.New(gate.Fixed(len(who)), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := dispatch.New(dispatch.Config{MaxSize: len(who), MaxWait: time.Hour, Timeout: time.Minute, Releaser: p}, g, dispatch.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	began := time.Now()
	var (
		mu     sync.Mutex
		starts []start
		wg     sync.WaitGroup
	)
	for _, w := range who {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Do(context.Background(), &request.Descriptor{Tenant: w[0]}, func(_ context.Context, m *dispatch.Member) error {
				mu.Lock()
				starts = append(starts, start{w[1], time.Since(began), HeldFor(m)})
				mu.Unlock()
				return fn(w[1], m)
			})
		}()
		synctest.Wait() // in arrival order
	}
	wg.Wait()
	slices.SortFunc(starts, func(a, b start) int { return cmp.Or(cmp.Compare(a.at, b.at), strings.Compare(a.name, b.name)) })
	return starts
}

// A tenant's first member of the wave goes at once, as does another
// tenant's; the tenant's others go once the first one's response has
// begun, and the metric counts how long they were held.
func TestTenantsOthersWaitForItsFirstResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := NewHeldHistogram()
		p := &TenantFirst{Held: h}
		var waiting int
		got := burst(t, p, func(name string, m *dispatch.Member) error {
			if name == "a1" {
				time.Sleep(time.Second)
				waiting = p.Waiting()
				m.MarkBegun()
				time.Sleep(time.Second)
			}
			return nil
		}, [2]string{"a", "a1"}, [2]string{"a", "a2"}, [2]string{"b", "b1"}, [2]string{"a", "a3"})
		want := []start{{"a1", 0, 0}, {"b1", 0, 0}, {"a2", time.Second, time.Second}, {"a3", time.Second, time.Second}}
		if !slices.Equal(got, want) {
			t.Errorf("started %v; want %v", got, want)
		}
		if waiting != 2 {
			t.Errorf("held while a1 had not begun: %d; want 2", waiting)
		}
		var mt dto.Metric
		if err := h.Write(&mt); err != nil {
			t.Fatal(err)
		}
		if n, sum := mt.GetHistogram().GetSampleCount(), mt.GetHistogram().GetSampleSum(); n != 2 || sum != 2 {
			t.Errorf("held seconds: %d observed, summing %v; want 2 summing 2", n, sum)
		}
		if p.Waiting() != 0 {
			t.Errorf("held after the wave: %d; want 0", p.Waiting())
		}
	})
}

// A first member that ends without a response lets its tenant's others go
// at its end: nobody is held for a response that will not come.
func TestTenantsOthersGoWhenItsFirstFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := burst(t, &TenantFirst{}, func(name string, m *dispatch.Member) error {
			if name == "a1" {
				time.Sleep(time.Second)
				return errors.New("upstream failed")
			}
			return nil
		}, [2]string{"a", "a1"}, [2]string{"a", "a2"})
		want := []start{{"a1", 0, 0}, {"a2", time.Second, time.Second}}
		if !slices.Equal(got, want) {
			t.Errorf("started %v; want %v", got, want)
		}
	})
}
