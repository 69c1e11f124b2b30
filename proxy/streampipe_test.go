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
		shared := &byteQuota{limit: 1 << 20}
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
		sp := newStreamPipe(1000, &byteQuota{limit: 1 << 20})
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
		sp := newStreamPipe(1000, &byteQuota{limit: 1 << 20})
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

// owingRecorder is a ResponseWriter that writes directly as a taken-over
// connection does (nowWriter), taking every piece but leaving owe bytes of
// each unsent until the next Flush, which waits for sent to close.
type owingRecorder struct {
	*httptest.ResponseRecorder
	owe     int
	owed    int
	direct  int // pieces written directly
	flushes int
	sent    chan struct{}
}

func (o *owingRecorder) WriteNow(p []byte) bool {
	o.direct++
	o.owed = min(o.owe, len(p))
	o.ResponseRecorder.Write(p)
	return true
}

func (o *owingRecorder) Owes() int { return o.owed }

func (o *owingRecorder) Flush() {
	<-o.sent
	o.flushes++
	o.owed = 0
	o.ResponseRecorder.Flush()
}

// Bytes a direct write left unsent are still in memory: they stay counted
// in the streams' shared budget until the writer has sent them, and the
// budget is all given back once the stream ends.
func TestStreamPipeCountsOwedBytesUntilSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := &byteQuota{limit: 1 << 20}
		sp := newStreamPipe(1000, shared)
		o := &owingRecorder{ResponseRecorder: httptest.NewRecorder(), owe: 6, sent: make(chan struct{})}
		sp.start(o, 200, time.Second)
		if err := sp.put(context.Background(), []byte("event: a\n\n"), false); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the writer waits in Flush to send what is owed
		if held := shared.Held(); held != 6 {
			t.Fatalf("while 6 bytes are owed: %d bytes held; want 6", held)
		}
		close(o.sent)
		synctest.Wait()
		if o.direct != 2 || o.flushes != 1 || o.owed != 0 {
			t.Fatalf("direct writes %d (want the headers and the event), flushes %d, still owed %d", o.direct, o.flushes, o.owed)
		}
		if held := shared.Held(); held != 0 {
			t.Fatalf("after the writer sent what was owed: %d bytes held; want 0", held)
		}
		sp.close()
		sp.wait()
		if held := shared.Held(); held != 0 {
			t.Fatalf("after the stream: %d bytes held", held)
		}
	})
}
