package sim

import (
	"net/http"

	"github.com/sluicehq/sluice/catalog"
)

// model and models are the catalogue the simulator lists (package
// catalog, which sluice also serves from on a cloud-only sluice).
type model = catalog.Model

var models = catalog.Models

func (s *Server) handleModelList(w http.ResponseWriter, r *http.Request) {
	p, aerr := catalog.Paginate(r, models, func(m model) string { return m.ID })
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) handleModelGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	for _, m := range models {
		if m.ID == id {
			writeJSON(w, http.StatusOK, m)
			return
		}
	}
	writeError(w, errNotFound("model: "+id+" is not a known model; list them with GET /v1/models"))
}
