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

// A silent stream holds no writer: the writer runs while there is
// something to write and ends once it has written it, every event reaches
// the client in order, and the pipe still ends (wait) when closed while
// no writer runs.
func TestStreamPipeWriterRunsOnlyWhileThereIsSomethingToWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := &byteBudget{limit: 1 << 20}
		sp := newStreamPipe(1000, shared)
		rec := httptest.NewRecorder()
		sp.start(rec, 200, time.Second)
		synctest.Wait()
		if rec.Code != 200 || !rec.Flushed || writerRuns(sp) {
			t.Fatalf("after start: status %d flushed %v, writer running %v; want 200 sent and no writer left", rec.Code, rec.Flushed, writerRuns(sp))
		}
		want := ""
		for _, ev := range []string{"event: a\n\n", "event: b\n\n", "event: c\n\n"} {
			if err := sp.put(context.Background(), []byte(ev), false); err != nil {
				t.Fatal(err)
			}
			want += ev
			synctest.Wait()
			if rec.Body.String() != want || writerRuns(sp) {
				t.Fatalf("after a put: body %q, writer running %v; want %q and no writer left", rec.Body.String(), writerRuns(sp), want)
			}
			time.Sleep(10 * time.Second) // a silence, as between an agent's bursts
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
		synctest.Wait()
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
