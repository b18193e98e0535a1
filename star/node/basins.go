package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
)

// basin returns the basin's cached entry, reading it on a miss, once the
// entry is older than Config.BasinCacheTTL, or when it is a deleted row
// (as with streams, only a live row is trusted: a peer may have created
// the basin again since); nil when the basin does not exist. The append
// path of an open stream reads no row; a star taking a stream on reads
// them again (freshRows), and a write never trusts the cache to judge
// what it overwrites (createStream).
func (n *Node) basin(ctx context.Context, name string) (*basinEntry, error) {
	n.mu.Lock()
	e := n.basins[name]
	n.mu.Unlock()
	if e == nil {
		return n.readBasin(ctx, name)
	}
	reason := "expired"
	switch {
	case e.row.DeletedAt != nil:
		reason = "deleted"
	case n.basinFresh(e, n.now()):
		return e, nil
	}
	n.catalog.basinRereads.WithLabelValues(reason).Inc()
	fresh, err := n.fetchBasin(ctx, name)
	if err != nil {
		// Through a metastore outage the star answers as it did before it
		// (its open streams keep acknowledging by design); what a write
		// overwrites is never judged on this entry (createStream).
		return e, nil
	}
	return fresh, nil
}

// readBasin reads the basin's row and caches it; nil when the basin does
// not exist.
func (n *Node) readBasin(ctx context.Context, name string) (*basinEntry, error) {
	e, err := n.fetchBasin(ctx, name)
	if err != nil {
		return nil, n.storageErr("read basin", err)
	}
	return e, nil
}

// fetchBasin is readBasin with the metastore's error as it came.
func (n *Node) fetchBasin(ctx context.Context, name string) (*basinEntry, error) {
	k := meta.BasinKey(name)
	it, err := n.meta.Get(ctx, k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		n.dropBasin(name)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	row, err := meta.DecodeBasinRow(it)
	if err != nil {
		return nil, fmt.Errorf("decode basin: %w", err)
	}
	e := &basinEntry{row: row, ver: it.Ver, readAt: n.now()}
	n.cacheBasin(name, e)
	return e, nil
}

// A row's version only grows (this package never deletes the row, and a
// create drops the cache entry before it writes), so a racing reader's
// older snapshot never replaces a newer one; the same version read again
// renews the entry's age.
func (n *Node) cacheBasin(name string, e *basinEntry) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if cur := n.basins[name]; cur == nil || cur.ver <= e.ver {
		n.basins[name] = e
	}
}

// liveBasin returns the basin if it exists and is not being deleted.
func (n *Node) liveBasin(ctx context.Context, name string) (*basinEntry, error) {
	e, err := n.basin(ctx, name)
	if err != nil {
		return nil, err
	}
	return n.checkBasin(name, e)
}

// checkBasin is liveBasin's judgment of entry e (nil: no such basin).
func (n *Node) checkBasin(name string, e *basinEntry) (*basinEntry, error) {
	if e == nil {
		return nil, api.BasinNotFound("basin %q not found", name)
	}
	switch lifecycleOf(e.row.DeletedAt, n.cfg.DeletionPending, n.now()) {
	case deleting:
		return nil, api.BasinDeletionPending("basin %q is being deleted", name)
	case gone:
		return nil, api.BasinNotFound("basin %q not found", name)
	}
	return e, nil
}

func basinInfo(name string, row BasinRow) api.BasinInfo {
	return api.BasinInfo{Name: name, CreatedAt: row.CreatedAt, DeletedAt: row.DeletedAt}
}

// putBasin writes a basin row under cond, then its directory row.
func (n *Node) putBasin(ctx context.Context, name string, row BasinRow, cond meta.Cond) (*basinEntry, error) {
	k := meta.BasinKey(name)
	ver, err := n.meta.Put(ctx, k.PK, k.SK, meta.Encode(row), cond)
	if err != nil {
		return nil, err
	}
	e := &basinEntry{row: row, ver: ver, readAt: n.now()}
	n.cacheBasin(name, e)
	// The config row decided; the directory row follows it. A crash in
	// between leaves the listing stale until the next write to the basin.
	dk := BasinDirKey(name)
	dir := BasinDirRow{ID: row.ID, CreatedAt: row.CreatedAt, DeletedAt: row.DeletedAt}
	if _, err := n.meta.Put(ctx, dk.PK, dk.SK, meta.Encode(dir), meta.Always()); err != nil {
		return e, n.storageErr("write basin directory", err)
	}
	return e, nil
}

// createBasin creates basin name with cfg, or reports the live basin that
// already holds the name (created false).
func (n *Node) createBasin(ctx context.Context, name string, cfg api.BasinConfig, token string) (e *basinEntry, created bool, err error) {
	if err := api.ValidateBasinName(name); err != nil {
		return nil, false, err
	}
	for {
		n.dropBasin(name) // decide on the stored row, not the cache
		cur, err := n.basin(ctx, name)
		if err != nil {
			return nil, false, err
		}
		cond := meta.IfAbsent()
		if cur != nil {
			switch lifecycleOf(cur.row.DeletedAt, n.cfg.DeletionPending, n.now()) {
			case alive:
				return cur, false, nil
			case deleting:
				return nil, false, api.BasinDeletionPending("basin %q is being deleted", name)
			}
			cond = meta.IfVer(cur.ver)
		}
		row := BasinRow{ID: n.ids(), Config: cfg, CreatedAt: n.now().UTC(), RequestToken: token, CreateKey: createKey(token, cfg)}
		e, err := n.putBasin(ctx, name, row, cond)
		if errors.Is(err, meta.ErrConditionFailed) {
			if err := ctx.Err(); err != nil {
				return nil, false, contextError(err)
			}
			continue
		}
		if err != nil && e == nil {
			return nil, false, n.storageErr("create basin", err)
		}
		return e, true, err
	}
}

func (n *Node) dropBasin(name string) {
	n.mu.Lock()
	delete(n.basins, name)
	n.mu.Unlock()
}

// CreateBasin creates a basin (POST /basins); see ProvisionBasin.
func (n *Node) CreateBasin(ctx context.Context, req api.CreateBasinRequest, token string) (api.BasinInfo, error) {
	info, _, err := n.ProvisionBasin(ctx, req, token)
	return info, err
}

// ProvisionBasin creates a basin (POST /basins) and returns the provision
// result: created, or noop for a retry of the create that made it (the
// same request token and config; another config is 409, as in S2).
func (n *Node) ProvisionBasin(ctx context.Context, req api.CreateBasinRequest, token string) (api.BasinInfo, string, error) {
	var cfg api.BasinConfig
	if req.Config != nil {
		cfg = *req.Config
		if err := cfg.Validate(); err != nil {
			return api.BasinInfo{}, "", err
		}
	}
	e, created, err := n.createBasin(ctx, req.Basin, cfg, token)
	if err != nil {
		return api.BasinInfo{}, "", err
	}
	if created {
		return basinInfo(req.Basin, e.row), api.ProvisionCreated, nil
	}
	if !sameCreate(createKey(token, cfg), token, e.row.CreateKey, e.row.RequestToken) {
		return api.BasinInfo{}, "", api.ResourceAlreadyExists("basin %q already exists", req.Basin)
	}
	return basinInfo(req.Basin, e.row), api.ProvisionNoop, nil
}

// BasinConfig returns a basin's config (GET /basins/{b}).
func (n *Node) BasinConfig(ctx context.Context, name string) (api.BasinConfig, error) {
	if err := api.ValidateBasinName(name); err != nil {
		return api.BasinConfig{}, err
	}
	e, err := n.liveBasin(ctx, name)
	if err != nil {
		return api.BasinConfig{}, err
	}
	return e.row.Config, nil
}

// EnsureBasin creates the basin with the config, or sets the config of the
// live basin (PUT /basins/{b}). It returns the provision result: created,
// updated or noop.
func (n *Node) EnsureBasin(ctx context.Context, name string, req api.EnsureBasinRequest) (api.BasinInfo, string, error) {
	var cfg api.BasinConfig
	if req.Config != nil {
		cfg = *req.Config
		if err := cfg.Validate(); err != nil {
			return api.BasinInfo{}, "", err
		}
	}
	for {
		e, created, err := n.createBasin(ctx, name, cfg, "")
		if err != nil {
			return api.BasinInfo{}, "", err
		}
		if created {
			return basinInfo(name, e.row), api.ProvisionCreated, nil
		}
		if bytes.Equal(meta.Encode(e.row.Config), meta.Encode(cfg)) {
			return basinInfo(name, e.row), api.ProvisionNoop, nil
		}
		row := e.row
		row.Config = cfg
		ne, err := n.putBasin(ctx, name, row, meta.IfVer(e.ver))
		if errors.Is(err, meta.ErrConditionFailed) {
			continue
		}
		if ne == nil {
			return api.BasinInfo{}, "", n.storageErr("update basin", err)
		}
		n.reconfigureLed(name)
		return basinInfo(name, ne.row), api.ProvisionUpdated, err
	}
}

// ReconfigureBasin patches a basin's config (PATCH /basins/{b}).
func (n *Node) ReconfigureBasin(ctx context.Context, name string, r api.BasinReconfiguration) (api.BasinConfig, error) {
	if err := api.ValidateBasinName(name); err != nil {
		return api.BasinConfig{}, err
	}
	if err := r.Validate(); err != nil {
		return api.BasinConfig{}, err
	}
	for {
		n.dropBasin(name)
		e, err := n.liveBasin(ctx, name)
		if err != nil {
			return api.BasinConfig{}, err
		}
		row := e.row
		row.Config = row.Config.Reconfigure(r)
		if err := row.Config.Validate(); err != nil {
			return api.BasinConfig{}, err
		}
		ne, err := n.putBasin(ctx, name, row, meta.IfVer(e.ver))
		if errors.Is(err, meta.ErrConditionFailed) {
			continue
		}
		if ne == nil {
			return api.BasinConfig{}, n.storageErr("reconfigure basin", err)
		}
		n.reconfigureLed(name)
		return ne.row.Config, err
	}
}

// DeleteBasin starts deleting a basin (DELETE /basins/{b}, 202). Its
// streams go with it: they carry the basin's id, which a new basin of the
// same name will not have. The basin row's deleted_at is the commit point;
// tombstoneStreams writes the rest. A delete that stopped after its mark
// is finished by any retry (which still answers 409
// basin_deletion_pending), by a create that takes one of its stream names
// (createStream), or by the janitor's retention pass. Reclaiming their
// records is the janitor's.
func (n *Node) DeleteBasin(ctx context.Context, name string) error {
	if err := api.ValidateBasinName(name); err != nil {
		return err
	}
	for range maxCatalogAttempts {
		n.dropBasin(name)
		e, err := n.basin(ctx, name)
		if err != nil {
			return err
		}
		state := gone
		if e != nil {
			state = lifecycleOf(e.row.DeletedAt, n.cfg.DeletionPending, n.now())
		}
		switch state {
		case gone:
			return api.BasinNotFound("basin %q not found", name)
		case deleting:
			if err := n.tombstoneStreams(ctx, name, e.row.ID, *e.row.DeletedAt, true); err != nil {
				return err
			}
			n.tellPeers(ctx, name)
			return api.BasinDeletionPending("basin %q is being deleted", name)
		}
		row := e.row
		now := n.now().UTC()
		row.DeletedAt = &now
		_, err = n.putBasin(ctx, name, row, meta.IfVer(e.ver))
		if errors.Is(err, meta.ErrConditionFailed) {
			continue
		}
		if err != nil {
			return n.storageErr("delete basin", err)
		}
		n.log.Info("basin deleted", "basin", name)
		if err := n.tombstoneStreams(ctx, name, e.row.ID, now, false); err != nil {
			return err
		}
		n.tellPeers(ctx, name)
		return nil
	}
	return api.Unavailable("basin %q kept changing while this star deleted it; retry", name)
}

// tombstoneStreams writes the tombstone of every stream of a deleted basin
// (incarnation basinID) and registers it for reclamation, so the auditor
// stops settling them and a basin re-created with its streams does not
// hide their ids. The basin is already marked deleted, so no stream can
// be created in it meanwhile (createStream reads the basin after the name
// row). If this fails part way, the rest are still recognisable by their
// basin id, which no live basin carries. A retry (again) registers each
// stream as finishDelete does, idempotently, instead of writing the batch
// over rows the janitor may already be working through.
func (n *Node) tombstoneStreams(ctx context.Context, basin, basinID string, at time.Time, again bool) error {
	pk := meta.StreamNameKey(basin, "").PK
	q := meta.Query{PK: pk, From: streamNamePrefix, To: "s$", Limit: 500}
	var (
		stop []streamKey
		ids  []string
	)
	for {
		pg, err := n.meta.Query(ctx, q)
		if err != nil {
			return n.storageErr("list streams of deleted basin", err)
		}
		var items []meta.Item
		for _, it := range pg.Items {
			row, err := meta.DecodeStreamRow(it)
			if err != nil || row.BasinID != basinID || row.DeletedAt != nil {
				continue // not this basin's, or tombstoned when it was deleted
			}
			name := strings.TrimPrefix(it.SK, streamNamePrefix)
			if again {
				if err := n.finishDelete(ctx, basin, name, row.ID, at); err != nil {
					return err
				}
				continue
			}
			tk := StreamTombstoneKey(row.ID)
			items = append(items, meta.Item{PK: tk.PK, SK: tk.SK, Val: meta.Encode(Tombstone{Basin: basin, Name: name, DeletedAt: at})})
			// Registered for reclamation at once (see DeleteStream): a
			// basin re-created with its streams would hide these ids.
			rk := meta.ReclaimStreamKey(row.ID)
			items = append(items, meta.Item{PK: rk.PK, SK: rk.SK, Val: meta.Encode(meta.ReclaimStream{Basin: basin, Stream: row.ID})})
			stop = append(stop, streamKey{basin, name})
			ids = append(ids, row.ID)
		}
		if len(items) > 0 {
			if err := n.meta.BatchPut(ctx, items); err != nil {
				return n.storageErr("write stream tombstones", err)
			}
		}
		// Streams led here stop now; peers leading others stop at their
		// next row check, and a re-create of a name retires its old lease.
		for i, id := range ids {
			n.stopDeleted(ctx, id, stop[i].name)
		}
		stop, ids = stop[:0], ids[:0]
		if pg.Next == "" {
			return nil
		}
		q.PageToken = pg.Next
	}
}

// ListBasins lists basins by name (GET /basins).
func (n *Node) ListBasins(ctx context.Context, req api.ListRequest) (api.ListBasinsResponse, error) {
	now := n.now()
	basins, more, err := scanRows(ctx, n, BasinDirPK, "", "~", req, func(name string, it meta.Item) (api.BasinInfo, bool, error) {
		row, err := meta.DecodeBasinDirRow(it)
		if err != nil {
			return api.BasinInfo{}, false, err
		}
		if lifecycleOf(row.DeletedAt, n.cfg.DeletionPending, now) == gone {
			return api.BasinInfo{}, false, nil
		}
		return api.BasinInfo{Name: name, CreatedAt: row.CreatedAt, DeletedAt: row.DeletedAt}, true, nil
	})
	if err != nil {
		return api.ListBasinsResponse{}, err
	}
	return api.ListBasinsResponse{Basins: basins, HasMore: more}, nil
}

// reconfigureLed re-applies the resolved timestamping of every led stream
// of a basin after its default stream config changed.
func (n *Node) reconfigureLed(basin string) {
	n.mu.Lock()
	b := n.basins[basin]
	var entries []*streamEntry
	for k, e := range n.streams {
		if k.basin == basin {
			entries = append(entries, e)
		}
	}
	n.mu.Unlock()
	if b == nil {
		return
	}
	for _, e := range entries {
		if l := n.ledIfOpen(e.row.ID); l != nil {
			l.s.Reconfigure(facadeConfig(e.row.Config.Resolve(b.row.Config.DefaultStreamConfig)))
		}
	}
}
