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
