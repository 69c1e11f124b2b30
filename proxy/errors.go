package proxy

import (
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/apierror"
)

func errMethod(allow string) *apierror.Error {
	return &apierror.Error{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
		Message: fmt.Sprintf("method not allowed on this path; use %s", allow)}
}

func errTooLarge(limit int64) *apierror.Error {
	return &apierror.Error{Status: http.StatusRequestEntityTooLarge, Type: "request_too_large",
		Message: fmt.Sprintf("request body exceeds the %d MB limit for this endpoint; send a smaller request (for bulk work, split it or use the Message Batches API)", limit>>20)}
}

func errBadJSON(detail string) *apierror.Error {
	return &apierror.Error{Status: http.StatusBadRequest, Type: "invalid_request_error",
		Message: "the request body must be a JSON object with model, max_tokens and messages: " + detail}
}
