package proxy

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"
)

// writerRuns reports whether a writer goroutine of sp is running.
func writerRuns(sp *streamPipe) bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.writing
}

// A silent stream holds no writer: the writer runs while the stream is
// busy (the events of a burst, a few milliseconds apart, are written by one
// goroutine) and ends once nothing has come for writerLinger; every event
// reaches the client at once and in order, and the pipe still ends (wait)
// when closed while no writer runs.
func TestStreamPipeWriterRunsOnlyWhileTheStreamIsBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := &byteBudget{limit: 1 << 20}
		sp := newStreamPipe(1000, shared)
		rec := httptest.NewRecorder()
		sp.start(rec, 200, time.Second)
		synctest.Wait()
		if rec.Code != 200 || !rec.Flushed {
			t.Fatalf("after start: status %d, flushed %v; want 200 sent at once", rec.Code, rec.Flushed)
		}
		want := ""
		for _, burst := range [][]string{{"event: a\n\n", "event: b\n\n"}, {"event: c\n\n"}} {
			for _, ev := range burst {
				if err := sp.put(context.Background(), []byte(ev), false); err != nil {
					t.Fatal(err)
				}
				want += ev
				synctest.Wait()
				if rec.Body.String() != want {
					t.Fatalf("after a put: body %q; want %q at once", rec.Body.String(), want)
				}
				time.Sleep(writerLinger / 10) // the next event of the burst
				synctest.Wait()
				if !writerRuns(sp) {
					t.Fatal("the writer ended within a burst")
				}
			}
			time.Sleep(10 * time.Second) // a silence, as between an agent's bursts
			synctest.Wait()
			if writerRuns(sp) {
				t.Fatal("a writer runs through the silence")
			}
		}
		sp.close()
		sp.wait()
		if shared.Held() != 0 {
			t.Fatalf("%d bytes still held; want the budget back", shared.Held())
		}
	})
}

// A pipe cut while no writer runs still ends, and refuses what comes after.
func TestStreamPipeFailedWhileSilentEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sp := newStreamPipe(1000, &byteBudget{limit: 1 << 20})
		sp.start(httptest.NewRecorder(), 200, time.Second)
		time.Sleep(10 * time.Second) // silent: the writer has ended
		synctest.Wait()
		if writerRuns(sp) {
			t.Fatal("a writer runs through the silence")
		}
		sp.fail(errClientStalled)
		sp.wait()
		if err := sp.put(context.Background(), []byte("event: a\n\n"), false); !errors.Is(err, errClientStalled) {
			t.Fatalf("put after the cut: %v; want errClientStalled", err)
		}
		sp.close()
	})
}

// flushCounter is a recorder that counts its flushes.
type flushCounter struct {
	*httptest.ResponseRecorder
	flushes int
}

func (f *flushCounter) Flush() { f.flushes++; f.ResponseRecorder.Flush() }

// Events that arrived together (more) go to the client in one write and
// one flush, once the last of them is put; none waits for a later read.
func TestStreamPipeWritesEventsThatCameTogetherAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sp := newStreamPipe(1000, &byteBudget{limit: 1 << 20})
		w := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
		sp.start(w, 200, time.Second)
		synctest.Wait()
		sp.put(context.Background(), []byte("event: a\n\n"), true)
		sp.put(context.Background(), []byte("event: b\n\n"), true)
		synctest.Wait()
		if w.Body.Len() != 0 {
			t.Fatalf("written before the last event of the read: %q", w.Body.String())
		}
		sp.put(context.Background(), []byte("event: c\n\n"), false)
		synctest.Wait()
		if got := w.Body.String(); got != "event: a\n\nevent: b\n\nevent: c\n\n" || w.flushes != 2 {
			t.Fatalf("wrote %q in %d flushes; want the three events in one flush after the status's", got, w.flushes)
		}
		sp.close()
		sp.wait()
	})
}
