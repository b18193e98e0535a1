package server

import (
	"net/url"
	"strings"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/node"
)

// routeKind names an endpoint; it is also the route label of the metrics.
type routeKind uint8

const (
	routeUnknown         routeKind = iota
	routeBasins                    // /v1/basins
	routeBasin                     // /v1/basins/{b}
	routeStreams                   // /v1/streams
	routeStream                    // /v1/streams/{s}
	routeRecords                   // /v1/streams/{s}/records
	routeTail                      // /v1/streams/{s}/records/tail
	routeHealth                    // /health
	routeMetrics                   // /metrics
	routeHandoff                   // /v1/starlog/streams/{s}/handoff (admin)
	routeDrain                     // /v1/starlog/drain (admin)
	routeSettle                    // /v1/starlog/settle (internal: a closing peer's nudge)
	routeTokens                    // /v1/access-tokens
	routeToken                     // /v1/access-tokens/{id}
	routeLocations                 // /v1/locations
	routeDefaultLocation           // /v1/locations/default
	routeAccountMetrics            // /v1/metrics
	routeBasinMetrics              // /v1/metrics/{b}
	routeStreamMetrics             // /v1/metrics/{b}/{s}
	routeDurableKeys               // /v1/starlog/durable/keys (admin)
	routeDurableRotate             // /v1/starlog/durable/keys/rotate (admin)
	routeStatus                    // /v1/starlog/status (admin: star status)
	routeKafka                     // /v1/starlog/kafka (internal: a peer's forwarded Kafka group request)
)

var routeNames = [...]string{"unknown", "basins", "basin", "streams", "stream", "records", "tail", "health", "metrics", "handoff", "drain", "settle", "access_tokens", "access_token",
	"locations", "default_location", "account_metrics", "basin_metrics", "stream_metrics", "durable_keys", "durable_rotate_keys", "status", "kafka"}

func (k routeKind) String() string { return routeNames[k] }

// route is a parsed request path. Name is the decoded basin or stream
// segment, stream the stream segment of a stream's metrics (not yet
// validated: a bad name is 400 bad_path, as S2 answers, from the router).
type route struct {
	kind   routeKind
	name   string
	stream string
}

// parsePath routes an escaped request path (r.URL.EscapedPath()): stream
// names are one percent-encoded segment, so "a%2Fb" is the stream "a/b"
// and must not be split. A path that matches no endpoint is 400 bad_path,
// and so is a segment that does not percent-decode.
func parsePath(escaped string) (route, *api.Error) {
	switch escaped {
	case "/health":
		return route{kind: routeHealth}, nil
	case "/metrics":
		return route{kind: routeMetrics}, nil
	case "/v1/basins":
		return route{kind: routeBasins}, nil
	case "/v1/streams":
		return route{kind: routeStreams}, nil
	case "/v1/access-tokens":
		return route{kind: routeTokens}, nil
	case "/v1/locations":
		return route{kind: routeLocations}, nil
	case "/v1/locations/default":
		return route{kind: routeDefaultLocation}, nil
	case "/v1/metrics":
		return route{kind: routeAccountMetrics}, nil
	case "/v1/starlog/drain":
		return route{kind: routeDrain}, nil
	case node.SettlePath:
		return route{kind: routeSettle}, nil
	case DurableKeysPath:
		return route{kind: routeDurableKeys}, nil
	case DurableRotatePath:
		return route{kind: routeDurableRotate}, nil
	case StatusPath:
		return route{kind: routeStatus}, nil
	case KafkaPath:
		return route{kind: routeKafka}, nil
	}
	rest, ok := strings.CutPrefix(escaped, "/v1/")
	if !ok {
		return route{}, api.BadPath("no such endpoint: %s", truncate(escaped, 128))
	}
	parts := strings.Split(rest, "/")
	seg := func(i int) (string, *api.Error) {
		s, err := url.PathUnescape(parts[i])
		if err != nil {
			return "", api.BadPath("malformed path segment %q", truncate(parts[i], 64))
		}
		return s, nil
	}
	switch {
	case parts[0] == "basins" && len(parts) == 2:
		name, err := seg(1)
		return route{kind: routeBasin, name: name}, err
	case parts[0] == "metrics" && len(parts) == 2:
		name, err := seg(1)
		return route{kind: routeBasinMetrics, name: name}, err
	case parts[0] == "metrics" && len(parts) == 3:
		name, err := seg(1)
		if err != nil {
			return route{}, err
		}
		stream, err := seg(2)
		return route{kind: routeStreamMetrics, name: name, stream: stream}, err
	case parts[0] == "access-tokens" && len(parts) == 2:
		id, err := seg(1)
		return route{kind: routeToken, name: id}, err
	case parts[0] == "streams" && len(parts) == 2:
		name, err := seg(1)
		return route{kind: routeStream, name: name}, err
	case parts[0] == "streams" && len(parts) == 3 && parts[2] == "records":
		name, err := seg(1)
		return route{kind: routeRecords, name: name}, err
	case parts[0] == "starlog" && len(parts) == 4 && parts[1] == "streams" && parts[3] == "handoff":
		name, err := seg(2)
		return route{kind: routeHandoff, name: name}, err
	case parts[0] == "streams" && len(parts) == 4 && parts[2] == "records" && parts[3] == "tail":
		name, err := seg(1)
		return route{kind: routeTail, name: name}, err
	}
	return route{}, api.BadPath("no such endpoint: %s", truncate(escaped, 128))
}

// allowed lists the methods of each endpoint, for 405 and its Allow header.
func (k routeKind) allowed() string {
	switch k {
	case routeBasins, routeStreams, routeTokens:
		return "GET, POST"
	case routeToken:
		return "DELETE"
	case routeBasin, routeStream:
		return "GET, PUT, PATCH, DELETE"
	case routeRecords:
		return "GET, POST"
	case routeHandoff, routeSettle, routeDurableRotate, routeKafka:
		return "POST"
	case routeDrain:
		return "GET, POST"
	case routeDefaultLocation:
		return "GET, PUT"
	default:
		return "GET"
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
