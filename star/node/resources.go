package node

import (
	"context"

	"github.com/starlog/starlog/shared/api"
)

// The resource API the node serves is the catalog's (star/catalog, where
// each method's rules are written); the node only delegates, so its
// surface names what it serves and not the catalog's helpers.

// CreateBasin creates a basin (POST /basins).
func (n *Node) CreateBasin(ctx context.Context, req api.CreateBasinRequest, token string) (api.BasinInfo, error) {
	return n.cat.CreateBasin(ctx, req, token)
}

// ProvisionBasin creates a basin (POST /basins) and returns the provision
// result: created, or noop for a retry of the create that made it.
func (n *Node) ProvisionBasin(ctx context.Context, req api.CreateBasinRequest, token string) (api.BasinInfo, string, error) {
	return n.cat.ProvisionBasin(ctx, req, token)
}

// BasinConfig returns a basin's config (GET /basins/{b}).
func (n *Node) BasinConfig(ctx context.Context, name string) (api.BasinConfig, error) {
	return n.cat.BasinConfig(ctx, name)
}

// EnsureBasin creates the basin or sets its config (PUT /basins/{b}).
func (n *Node) EnsureBasin(ctx context.Context, name string, req api.EnsureBasinRequest) (api.BasinInfo, string, error) {
	return n.cat.EnsureBasin(ctx, name, req)
}

// ReconfigureBasin patches a basin's config (PATCH /basins/{b}).
func (n *Node) ReconfigureBasin(ctx context.Context, name string, r api.BasinReconfiguration) (api.BasinConfig, error) {
	return n.cat.ReconfigureBasin(ctx, name, r)
}

// DeleteBasin deletes a basin (DELETE /basins/{b}).
func (n *Node) DeleteBasin(ctx context.Context, name string) error {
	return n.cat.DeleteBasin(ctx, name)
}

// ListBasins lists basins by name (GET /basins).
func (n *Node) ListBasins(ctx context.Context, req api.ListRequest) (api.ListBasinsResponse, error) {
	return n.cat.ListBasins(ctx, req)
}

// CreateStream creates a stream (POST /streams).
func (n *Node) CreateStream(ctx context.Context, basin string, req api.CreateStreamRequest, token string) (api.StreamInfo, error) {
	return n.cat.CreateStream(ctx, basin, req, token)
}

// ProvisionStream creates a stream (POST /streams) and returns the
// provision result: created, or noop for a retry of the create that made it.
func (n *Node) ProvisionStream(ctx context.Context, basin string, req api.CreateStreamRequest, token string) (api.StreamInfo, string, error) {
	return n.cat.ProvisionStream(ctx, basin, req, token)
}

// StreamConfig returns a stream's fully resolved config (GET /streams/{s}).
func (n *Node) StreamConfig(ctx context.Context, basin, name string) (api.StreamConfig, error) {
	return n.cat.StreamConfig(ctx, basin, name)
}

// EnsureStream creates the stream or sets its config (PUT /streams/{s}).
func (n *Node) EnsureStream(ctx context.Context, basin, name string, cfg api.StreamConfig) (api.StreamInfo, string, error) {
	return n.cat.EnsureStream(ctx, basin, name, cfg)
}

// ReconfigureStream patches a stream's config (PATCH /streams/{s}).
func (n *Node) ReconfigureStream(ctx context.Context, basin, name string, r api.StreamReconfiguration) (api.StreamConfig, error) {
	return n.cat.ReconfigureStream(ctx, basin, name, r)
}

// DeleteStream deletes a stream (DELETE /streams/{s}).
func (n *Node) DeleteStream(ctx context.Context, basin, name string) error {
	return n.cat.DeleteStream(ctx, basin, name)
}

// ListStreams lists a basin's streams by name (GET /streams).
func (n *Node) ListStreams(ctx context.Context, basin string, req api.ListRequest) (api.ListStreamsResponse, error) {
	return n.cat.ListStreams(ctx, basin, req)
}

// StreamID is the id of the stream now under the name.
func (n *Node) StreamID(ctx context.Context, basin, name string) (string, error) {
	return n.cat.StreamID(ctx, basin, name)
}

// StreamCipher is the cipher a request on the stream must use.
func (n *Node) StreamCipher(ctx context.Context, basin, name string) (string, error) {
	return n.cat.StreamCipher(ctx, basin, name)
}

// StreamStorageBytes and BasinStorageBytes are the stored bytes of S2's
// storage metric.
func (n *Node) StreamStorageBytes(ctx context.Context, basin, name string) (uint64, error) {
	return n.cat.StreamStorageBytes(ctx, basin, name)
}

func (n *Node) BasinStorageBytes(ctx context.Context, basin string) (uint64, error) {
	return n.cat.BasinStorageBytes(ctx, basin)
}
