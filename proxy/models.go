package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/upstream"
)

// Model discovery: GET /v1/models and GET /v1/models/{id}, what the
// SDKs' models.list and Claude Code's gateway model discovery
// (CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY=1) ask. With a first-party
// key the caller may use, the upstream answers, as any relayed call;
// without one (a sluice whose backends are all clouds, or a sluice key
// limited to cloud backends) sluice answers from the model tables of the
// backends the caller may use, which no cloud serves as a list. Either
// way a sluice key limited to some models is shown only those.

// modelsCall reports whether r asks for the model list (list) or one
// model (id).
func modelsCall(r *http.Request) (id string, list, ok bool) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return "", false, false
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	if path == "/v1/models" {
		return "", true, true
	}
	if id, found := strings.CutPrefix(path, "/v1/models/"); found && id != "" && !strings.Contains(id, "/") {
		return id, false, true
	}
	return "", false, false
}

// answersModelsItself reports whether sluice answers r, a models call,
// from its backends' tables: routing is on and no first-party key r may
// use can be asked.
func (p *Proxy) answersModelsItself(r *http.Request) bool {
	return p.routes != nil && firstParty(p.routes, r) == nil
}

// serveModelTable answers a models call from the model tables of the
// backends r may use, newest first, paged as the API pages.
func (p *Proxy) serveModelTable(w http.ResponseWriter, r *http.Request, id string, list bool) {
	in := inboundOf(r)
	seen := map[string]bool{}
	usable := false
	for _, k := range p.routes.Keys {
		if !k.Allows(in) {
			continue
		}
		usable = true
		lister, ok := k.Backend.Client.(upstream.ModelLister)
		if !ok {
			continue
		}
		for _, m := range lister.ModelIDs() {
			if allowsModel(in, m) {
				seen[m] = true
			}
		}
	}
	if !usable {
		apierror.WriteSluice(w, errNoBackend(in))
		return
	}
	if !list {
		if !seen[id] {
			apierror.WriteSluice(w, errModelNotServed(id))
			return
		}
		writeModelJSON(w, catalog.Of(id))
		return
	}
	models := make([]catalog.Model, 0, len(seen))
	for m := range seen {
		models = append(models, catalog.Of(m))
	}
	slices.SortFunc(models, newestFirst)
	page, aerr := catalog.Paginate(r, models, func(m catalog.Model) string { return m.ID })
	if aerr != nil {
		apierror.WriteSluice(w, aerr)
		return
	}
	writeModelJSON(w, page)
}

// newestFirst orders a model list as the API does: the catalogue's order
// for the models it lists, then the rest newest first, then by id.
func newestFirst(a, b catalog.Model) int {
	ia, ib := catalogIndex(a.ID), catalogIndex(b.ID)
	switch {
	case ia >= 0 && ib >= 0:
		return ia - ib
	case ia >= 0:
		return -1
	case ib >= 0:
		return 1
	}
	if c := strings.Compare(b.CreatedAt, a.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

func catalogIndex(id string) int {
	return slices.IndexFunc(catalog.Models, func(m catalog.Model) bool { return m.ID == id })
}

func writeModelJSON(w http.ResponseWriter, v any) {
	body, _ := json.Marshal(v) // plain structs of strings: cannot fail
	w.Header().Set("Content-Type", "application/json")
	writeRaw(w, http.StatusOK, body)
}

func errModelNotServed(id string) *apierror.Error {
	return &apierror.Error{Status: http.StatusNotFound, Type: "not_found_error",
		Message: fmt.Sprintf("model: %s is not served by this sluice's backends for this key; list the models it serves with GET /v1/models", id)}
}

// filtersModelList reports whether the upstream's model list must be cut
// to what r's sluice key may call.
func filtersModelList(r *http.Request) bool {
	_, list, ok := modelsCall(r)
	in := inboundOf(r)
	return ok && list && in != nil && in.Models != nil
}

// relayModelList relays the upstream's model list (a 200) with only the
// models in may call; one it cannot read (compressed, not the API's
// JSON) is a 502 rather than a list of models the key may not call. The page's cursors (first_id, last_id, has_more) stay the
// upstream's, so paging on with after_id walks the whole list.
func (p *Proxy) relayModelList(w http.ResponseWriter, in *request.Inbound, resp *http.Response) {
	data, err := readUpstreamBody(resp, p.cfg.StreamIdleTimeout)
	if errors.Is(err, errResponseTooLarge) {
		apierror.WriteSluice(w, &apierror.Error{Status: http.StatusBadGateway, Type: "api_error",
			Message: fmt.Sprintf("the upstream's model list exceeded %d MB; sluice did not relay it", maxResponseBody>>20)})
		return
	}
	if err != nil {
		apierror.WriteSluice(w, p.mapError(&upstream.Error{Upstream: p.upstreamName(), Err: err}))
		return
	}
	var page map[string]json.RawMessage
	var items []json.RawMessage
	if json.Unmarshal(data, &page) != nil || json.Unmarshal(page["data"], &items) != nil {
		apierror.WriteSluice(w, &apierror.Error{Status: http.StatusBadGateway, Type: "api_error",
			Message: "the upstream's model list is not the API's JSON; sluice cannot show only the models this key may call, so it did not relay it"})
		return
	}
	kept := make([]json.RawMessage, 0, len(items))
	for _, it := range items {
		var m struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(it, &m) == nil && allowsModel(in, m.ID) {
			kept = append(kept, it)
		}
	}
	page["data"], _ = json.Marshal(kept)
	out, _ := json.Marshal(page)
	upstream.CopyHeader(w.Header(), resp.Header)
	w.Header().Del("Content-Length")
	writeRaw(w, resp.StatusCode, out)
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}
