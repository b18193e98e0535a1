package sdk

import (
	"context"
	"iter"
	"net/http"
	"net/url"

	"github.com/starlog/starlog/shared/api"
)

// Basin is a handle on one basin's streams. It is cheap; make as many as
// needed.
type Basin struct {
	c    *Client
	name string
}

// Basin returns a handle on the named basin. Nothing is checked until a
// call is made.
func (c *Client) Basin(name string) *Basin { return &Basin{c: c, name: name} }

// Name is the basin's name.
func (b *Basin) Name() string { return b.name }

// ListStreams returns one page of the basin's streams.
func (b *Basin) ListStreams(ctx context.Context, req api.ListRequest) (api.ListStreamsResponse, error) {
	var out api.ListStreamsResponse
	r := &request{method: http.MethodGet, basin: b.name, path: "/streams", query: req.Query()}
	_, err := b.c.doJSON(ctx, r, idempotent, nil, &out)
	return out, err
}

// AllStreams iterates over every stream whose name starts with prefix,
// fetching pages as it goes. It stops at the first error, which it yields.
func (b *Basin) AllStreams(ctx context.Context, prefix string) iter.Seq2[api.StreamInfo, error] {
	return func(yield func(api.StreamInfo, error) bool) {
		req := api.ListRequest{Prefix: prefix}
		for {
			page, err := b.ListStreams(ctx, req)
			if err != nil {
				yield(api.StreamInfo{}, err)
				return
			}
			for _, s := range page.Streams {
				if !yield(s, nil) {
					return
				}
			}
			if !page.HasMore || len(page.Streams) == 0 {
				return
			}
			req.StartAfter = page.Streams[len(page.Streams)-1].Name
		}
	}
}

// CreateStream creates a stream (409 resource_already_exists if it
// exists). Retries reuse one s2-request-token.
func (b *Basin) CreateStream(ctx context.Context, name string, cfg *api.StreamConfig) (api.StreamInfo, error) {
	var out api.StreamInfo
	r := &request{method: http.MethodPost, basin: b.name, path: "/streams",
		header: http.Header{api.HeaderRequestToken: {newRequestToken()}}}
	_, err := b.c.doJSON(ctx, r, idempotent, api.CreateStreamRequest{Stream: name, Config: cfg}, &out)
	return out, err
}

// GetStreamConfig returns a stream's fully resolved config.
func (b *Basin) GetStreamConfig(ctx context.Context, name string) (api.StreamConfig, error) {
	var out api.StreamConfig
	_, err := b.c.doJSON(ctx, &request{method: http.MethodGet, basin: b.name, path: streamPath(name)}, idempotent, nil, &out)
	return out, err
}

// EnsureStream creates the stream or brings its config to cfg (PUT).
func (b *Basin) EnsureStream(ctx context.Context, name string, cfg api.StreamConfig) (ProvisionResult, error) {
	resp, err := b.c.doJSON(ctx, &request{method: http.MethodPut, basin: b.name, path: streamPath(name)}, idempotent, cfg, nil)
	if err != nil {
		return "", err
	}
	return provisionResult(resp), nil
}

// ReconfigureStream patches a stream's config and returns the resolved
// result.
func (b *Basin) ReconfigureStream(ctx context.Context, name string, r api.StreamReconfiguration) (api.StreamConfig, error) {
	var out api.StreamConfig
	_, err := b.c.doJSON(ctx, &request{method: http.MethodPatch, basin: b.name, path: streamPath(name)}, idempotent, r, &out)
	return out, err
}

// DeleteStream starts deleting a stream (202; the name lists with
// deleted_at until it is gone).
func (b *Basin) DeleteStream(ctx context.Context, name string) error {
	_, err := b.c.do(ctx, &request{method: http.MethodDelete, basin: b.name, path: streamPath(name)}, idempotent)
	return err
}

// Stream returns a handle on one stream of the basin.
func (b *Basin) Stream(name string) *Stream { return &Stream{b: b, name: name} }

func streamPath(name string) string { return "/streams/" + url.PathEscape(name) }
