package sim

import (
	"encoding/json"
	"net/http"
)

// apiError is an error the simulator answers with, in the API's shape.
type apiError struct {
	Status  int
	Type    string
	Message string
}

func (e *apiError) Error() string { return e.Type + ": " + e.Message }

func errInvalid(msg string) *apiError {
	return &apiError{http.StatusBadRequest, "invalid_request_error", msg}
}

func errNotFound(msg string) *apiError {
	return &apiError{http.StatusNotFound, "not_found_error", msg}
}

// errorTypeFor maps a status to the API's error.type, as the errors table does.
func errorTypeFor(status int) string {
	switch status {
	case 401:
		return "authentication_error"
	case 402:
		return "billing_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 500:
		return "api_error"
	case 504:
		return "timeout_error"
	case 529:
		return "overloaded_error"
	}
	return "invalid_request_error"
}

// errorBody is the JSON of an error response and of an in-band SSE error.
type errorBody struct {
	Type      string      `json:"type"`
	Error     errorDetail `json:"error"`
	RequestID string      `json:"request_id,omitempty"`
}

type errorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// writeError is the one place an error becomes a response.
func writeError(w http.ResponseWriter, e *apiError) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	body := errorBody{Type: "error", Error: errorDetail{e.Type, e.Message}, RequestID: h.Get("request-id")}
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(body)
}
