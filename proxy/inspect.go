package proxy

import (
	"net/http"

	"github.com/sluicehq/sluice/request"
)

// inspect reads the descriptor of a Messages request (see request.Parse).
// It refuses, with a 400, only a body that is empty, not a JSON object or
// not valid JSON; everything else about the body is the upstream's to
// judge, so that sluice never rejects a request the API would accept: a
// model or stream of the wrong type is the upstream's to refuse.
func inspect(body []byte, h http.Header) (request.Descriptor, *apiError) {
	d, err := request.Parse(body, h)
	if err != nil {
		return d, errBadJSON(err.Error())
	}
	return d, nil
}
