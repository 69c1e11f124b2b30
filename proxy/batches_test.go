package proxy

import (
	"bufio"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

func TestBatchResultsURLPointsAtSluice(t *testing.T) {
	var upURL string
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/messages/batches/msgbatch_1":
			io.WriteString(w, `{"id":"msgbatch_1","type":"message_batch","processing_status":"ended", "results_url": "`+upURL+`/v1/messages/batches/msgbatch_1/results"}`)
		case "/v1/messages/batches":
			io.WriteString(w, `{"data":[{"id":"b2","results_url":"https://api.anthropic.com/v1/messages/batches/b2/results"},{"id":"b3","results_url":null}],"has_more":false}`)
		case "/v1/messages/batches/msgbatch_1/results":
			w.Header().Set("Content-Type", "application/x-jsonl")
			io.WriteString(w, `{"custom_id":"a","result":{"type":"succeeded","results_url":"`+upURL+`/x"}}`+"\n")
		}
	})
	upURL = up.URL
	_, px := startProxy(t, testConfig(t, up.URL, true))
	get := func(path string) string {
		resp, err := http.Get(px.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return readAll(t, resp.Body)
	}
	if got, want := get("/v1/messages/batches/msgbatch_1"),
		`{"id":"msgbatch_1","type":"message_batch","processing_status":"ended", "results_url": "`+px.URL+`/v1/messages/batches/msgbatch_1/results"}`; got != want {
		t.Errorf("batch = %s\nwant    %s", got, want)
	}
	if got, want := get("/v1/messages/batches"),
		`{"data":[{"id":"b2","results_url":"`+px.URL+`/v1/messages/batches/b2/results"},{"id":"b3","results_url":null}],"has_more":false}`; got != want {
		t.Errorf("list = %s\nwant   %s", got, want)
	}
	// The results themselves are relayed untouched.
	if got := get("/v1/messages/batches/msgbatch_1/results"); !strings.Contains(got, up.URL+"/x") {
		t.Errorf("results were rewritten: %s", got)
	}
}

// results_url is built from PUBLIC_URL, never from the client's Host
// header: the SDKs fetch it verbatim, with the API key.
func TestResultsURLIgnoresTheHostHeader(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"msgbatch_1","type":"message_batch","results_url":"https://api.anthropic.com/v1/messages/batches/msgbatch_1/results"}`)
	})
	public, _ := url.Parse("https://sluice.internal:8443/gw")
	_, px := startProxyWith(t, testConfig(t, up.URL, false, func(c *config.Config) { c.PublicURL = public }), Options{})
	conn := rawRequest(t, px.Listener.Addr().String(), "GET /v1/messages/batches/msgbatch_1 HTTP/1.1\r\nHost: evil.example:21999\r\nX-Api-Key: sk-test", "")
	_, body := readAnswer(t, conn, bufio.NewReader(conn))
	if want := `"results_url":"https://sluice.internal:8443/gw/v1/messages/batches/msgbatch_1/results"`; !strings.Contains(string(body), want) || strings.Contains(string(body), "evil") {
		t.Fatalf("batch = %s; want %s", body, want)
	}
}
