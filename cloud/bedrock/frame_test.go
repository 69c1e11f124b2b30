package bedrock

import (
	"encoding/binary"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// zeros is an endless stream of zero bytes that counts what was read.
type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	clear(p)
	z.n += int64(len(p))
	return len(p), nil
}

func (z *zeros) Close() error { return nil }

// TestHugeFrameRefused: a broken Bedrock (or whatever answers at its
// endpoint) that announces one event-stream frame of 64 MB is refused at
// its prelude, as a read error of the stream: the frame is not read into
// memory whole (the decoder buffers a frame before anything is relayed).
func TestHugeFrameRefused(t *testing.T) {
	var prelude [12]byte
	binary.BigEndian.PutUint32(prelude[0:], 64<<20) // total length
	binary.BigEndian.PutUint32(prelude[4:], 0)      // headers length
	binary.BigEndian.PutUint32(prelude[8:], crc32.ChecksumIEEE(prelude[:8]))
	rest := &zeros{}
	body := struct {
		io.Reader
		io.Closer
	}{io.MultiReader(strings.NewReader(string(prelude[:])), rest), rest}
	resp := streamAnswer(httptest.NewRequest(http.MethodPost, "/v1/messages", nil), &http.Response{StatusCode: 200, Body: body}, "", "bedrock backend", aws.Credentials{})
	_, err := io.Copy(io.Discard, resp.Body)
	if err == nil || !strings.Contains(err.Error(), "frame") {
		t.Errorf("reading the stream: %v; want a read error about the frame's size", err)
	}
	if rest.n > maxFrame {
		t.Errorf("%d bytes of the frame were read; want it refused at its prelude", rest.n)
	}
}
