package proxy

import (
	"errors"
	"net/http"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/request"
)

// inspect reads the descriptor of a Messages request and its prompt's
// blocks (see request.ParseBlocks), which explain its cache writes.
// It refuses, with a 400, only a body that is empty, not a JSON object or
// not valid JSON, or that names a member sluice reads (model, stream,
// max_tokens, ...) twice or in another case (request.NameError), which
// decoders read differently, so that what sluice checks could differ from
// what the upstream serves. Everything else about the body is the
// upstream's to judge: a model or stream of the wrong type is the
// upstream's to refuse.
func inspect(body []byte, h http.Header) (request.Descriptor, []request.Block, *apierror.Error) {
	d, bs, err := request.ParseBlocks(body, h)
	var ne *request.NameError
	switch {
	case errors.As(err, &ne):
		return d, nil, &apierror.Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: err.Error()}
	case err != nil:
		return d, nil, errBadJSON(err.Error())
	}
	return d, bs, nil
}
