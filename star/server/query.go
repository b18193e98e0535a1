package server

import (
	"net/http"
	"net/url"

	"github.com/starlog/starlog/shared/api"
)

// query parses r's query string: a pair that does not decode is 400
// bad_query (r.URL.Query() would drop it silently).
func query(r *http.Request) (url.Values, *api.Error) {
	return api.ParseQuery(r.URL.RawQuery)
}

// parseList parses r's list query (prefix, start_after, limit), whose
// names are at most max bytes (see api.ListRequest.Within).
func parseList(r *http.Request, max int) (api.ListRequest, *api.Error) {
	q, err := query(r)
	if err != nil {
		return api.ListRequest{}, err
	}
	req, err := api.ParseListQuery(q)
	if err == nil {
		err = req.Within(max)
	}
	return req, err
}
