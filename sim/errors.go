package sim

import (
	"net/http"

	"github.com/sluicehq/sluice/apierror"
)

func errInvalid(msg string) *apierror.Error {
	return apierror.New(http.StatusBadRequest, "invalid_request_error", msg)
}

func errNotFound(msg string) *apierror.Error {
	return apierror.New(http.StatusNotFound, "not_found_error", msg)
}

// writeError is the one place an error becomes a response, under the
// request-id ServeHTTP set.
func writeError(w http.ResponseWriter, e *apierror.Error) {
	apierror.Write(w, w.Header().Get("request-id"), e)
}
