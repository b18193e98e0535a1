package sdk

import (
	"context"
	"iter"
	"net/http"
	"net/url"

	"github.com/starlog/starlog/shared/api"
)

// ListBasins returns one page of basins.
func (c *Client) ListBasins(ctx context.Context, req api.ListRequest) (api.ListBasinsResponse, error) {
	var out api.ListBasinsResponse
	_, err := c.doJSON(ctx, &request{method: http.MethodGet, path: "/basins", query: req.Query()}, idempotent, nil, &out)
	return out, err
}

// AllBasins iterates over every basin whose name starts with prefix,
// fetching pages as it goes. It stops at the first error, which it yields.
func (c *Client) AllBasins(ctx context.Context, prefix string) iter.Seq2[api.BasinInfo, error] {
	return func(yield func(api.BasinInfo, error) bool) {
		req := api.ListRequest{Prefix: prefix}
		for {
			page, err := c.ListBasins(ctx, req)
			if err != nil {
				yield(api.BasinInfo{}, err)
				return
			}
			for _, b := range page.Basins {
				if !yield(b, nil) {
					return
				}
			}
			if !page.HasMore || len(page.Basins) == 0 {
				return
			}
			req.StartAfter = page.Basins[len(page.Basins)-1].Name
		}
	}
}

// CreateBasin creates a basin (409 resource_already_exists if it exists).
// Retries reuse one s2-request-token, so a server that honours it creates
// the basin once.
func (c *Client) CreateBasin(ctx context.Context, name string, cfg *api.BasinConfig) (api.BasinInfo, error) {
	var out api.BasinInfo
	r := &request{method: http.MethodPost, path: "/basins", header: http.Header{api.HeaderRequestToken: {newRequestToken()}}}
	_, err := c.doJSON(ctx, r, idempotent, api.CreateBasinRequest{Basin: name, Config: cfg}, &out)
	return out, err
}

// GetBasinConfig returns a basin's config.
func (c *Client) GetBasinConfig(ctx context.Context, name string) (api.BasinConfig, error) {
	var out api.BasinConfig
	_, err := c.doJSON(ctx, &request{method: http.MethodGet, path: basinPath(name)}, idempotent, nil, &out)
	return out, err
}

// EnsureBasin creates the basin or brings its config to cfg (PUT).
func (c *Client) EnsureBasin(ctx context.Context, name string, cfg *api.BasinConfig) (ProvisionResult, error) {
	resp, err := c.doJSON(ctx, &request{method: http.MethodPut, path: basinPath(name)}, idempotent, api.EnsureBasinRequest{Config: cfg}, nil)
	if err != nil {
		return "", err
	}
	return provisionResult(resp), nil
}

// ReconfigureBasin patches a basin's config and returns the result.
func (c *Client) ReconfigureBasin(ctx context.Context, name string, r api.BasinReconfiguration) (api.BasinConfig, error) {
	var out api.BasinConfig
	_, err := c.doJSON(ctx, &request{method: http.MethodPatch, path: basinPath(name)}, idempotent, r, &out)
	return out, err
}

// DeleteBasin starts deleting a basin (the server answers 202 and deletes
// asynchronously).
func (c *Client) DeleteBasin(ctx context.Context, name string) error {
	_, err := c.do(ctx, &request{method: http.MethodDelete, path: basinPath(name)}, idempotent)
	return err
}

func basinPath(name string) string { return "/basins/" + url.PathEscape(name) }
