package proxy

import (
	"net/http"

	"github.com/sluicehq/sluice/request"
)

// inspect reads the descriptor of a Messages request and its prompt's
// blocks (see request.ParseBlocks), which explain its cache writes.
// It refuses, with a 400, only a body that is empty, not a JSON object or
// not valid JSON; everything else about the body is the upstream's to
// judge, so that sluice never rejects a request the API would accept: a
// model or stream of the wrong type is the upstream's to refuse.
func inspect(body []byte, h http.Header) (request.Descriptor, []request.Block, *apiError) {
	d, bs, err := request.ParseBlocks(body, h)
	if err != nil {
		return d, nil, errBadJSON(err.Error())
	}
	return d, bs, nil
}
