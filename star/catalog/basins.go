package catalog

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
// them again (FreshRows), and a write never trusts the cache to judge
// what it overwrites (createStream).
func (c *Catalog) basin(ctx context.Context, name string) (*BasinEntry, error) {
	c.mu.Lock()
	e := c.basins[name]
	c.mu.Unlock()
	if e == nil {
		return c.readBasin(ctx, name)
	}
	reason := "expired"
	switch {
	case e.Row.DeletedAt != nil:
		reason = "deleted"
	case c.basinFresh(e, c.now()):
		return e, nil
	}
	c.m.basinRereads.WithLabelValues(reason).Inc()
	fresh, err := c.fetchBasin(ctx, name)
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
func (c *Catalog) readBasin(ctx context.Context, name string) (*BasinEntry, error) {
	e, err := c.fetchBasin(ctx, name)
	if err != nil {
		return nil, c.storageErr("read basin", err)
	}
	return e, nil
}

// fetchBasin is readBasin with the metastore's error as it came.
func (c *Catalog) fetchBasin(ctx context.Context, name string) (*BasinEntry, error) {
	k := meta.BasinKey(name)
	it, err := c.meta.Get(ctx, k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		c.dropBasin(name)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	row, err := meta.DecodeBasinRow(it)
	if err != nil {
		return nil, fmt.Errorf("decode basin: %w", err)
	}
	e := &BasinEntry{Row: row, Ver: it.Ver, ReadAt: c.now()}
	c.cacheBasin(name, e)
	return e, nil
}

// A row's version only grows (this package never deletes the row, and a
// create drops the cache entry before it writes), so a racing reader's
// older snapshot never replaces a newer one; the same version read again
// renews the entry's age.
func (c *Catalog) cacheBasin(name string, e *BasinEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.basins[name]; cur == nil || cur.Ver <= e.Ver {
		c.basins[name] = e
	}
}

// LiveBasin returns the basin if it exists and is not being deleted.
func (c *Catalog) LiveBasin(ctx context.Context, name string) (*BasinEntry, error) {
	e, err := c.basin(ctx, name)
	if err != nil {
		return nil, err
	}
	return c.checkBasin(name, e)
}

// checkBasin is LiveBasin's judgment of entry e (nil: no such basin).
func (c *Catalog) checkBasin(name string, e *BasinEntry) (*BasinEntry, error) {
	if e == nil {
		return nil, api.BasinNotFound("basin %q not found", name)
	}
	switch LifecycleOf(e.Row.DeletedAt, c.cfg.DeletionPending, c.now()) {
	case Deleting:
		return nil, api.BasinDeletionPending("basin %q is being deleted", name)
	case Gone:
		return nil, api.BasinNotFound("basin %q not found", name)
	}
	return e, nil
}

func basinInfo(name string, row meta.BasinRow) api.BasinInfo {
	return api.BasinInfo{Name: name, CreatedAt: row.CreatedAt, DeletedAt: row.DeletedAt}
}

// putBasin writes a basin row under cond, then its directory row.
func (c *Catalog) putBasin(ctx context.Context, name string, row meta.BasinRow, cond meta.Cond) (*BasinEntry, error) {
	k := meta.BasinKey(name)
	ver, err := c.meta.Put(ctx, k.PK, k.SK, meta.Encode(row), cond)
	if err != nil {
		return nil, err
	}
	e := &BasinEntry{Row: row, Ver: ver, ReadAt: c.now()}
	c.cacheBasin(name, e)
	// The config row decided; the directory row follows it. A crash in
	// between leaves the listing stale until the next write to the basin.
	dk := meta.BasinDirKey(name)
	dir := meta.BasinDirRow{ID: row.ID, CreatedAt: row.CreatedAt, DeletedAt: row.DeletedAt}
	if _, err := c.meta.Put(ctx, dk.PK, dk.SK, meta.Encode(dir), meta.Always()); err != nil {
		return e, c.storageErr("write basin directory", err)
	}
	return e, nil
}

// createBasin creates basin name with cfg, or reports the live basin that
// already holds the name (created false).
func (c *Catalog) createBasin(ctx context.Context, name string, cfg api.BasinConfig, token string) (e *BasinEntry, created bool, err error) {
	if err := api.ValidateBasinName(name); err != nil {
		return nil, false, err
	}
	for {
		c.dropBasin(name) // decide on the stored row, not the cache
		cur, err := c.basin(ctx, name)
		if err != nil {
			return nil, false, err
		}
		cond := meta.IfAbsent()
		if cur != nil {
			switch LifecycleOf(cur.Row.DeletedAt, c.cfg.DeletionPending, c.now()) {
			case Alive:
				return cur, false, nil
			case Deleting:
				return nil, false, api.BasinDeletionPending("basin %q is being deleted", name)
			}
			cond = meta.IfVer(cur.Ver)
		}
		row := meta.BasinRow{ID: c.ids(), Config: cfg, CreatedAt: c.now().UTC(), RequestToken: token, CreateKey: createKey(token, cfg)}
		e, err := c.putBasin(ctx, name, row, cond)
		if errors.Is(err, meta.ErrConditionFailed) {
			if err := ctx.Err(); err != nil {
				return nil, false, ContextError(err)
			}
			continue
		}
		if err != nil && e == nil {
			return nil, false, c.storageErr("create basin", err)
		}
		return e, true, err
	}
}

func (c *Catalog) dropBasin(name string) {
	c.mu.Lock()
	delete(c.basins, name)
	c.mu.Unlock()
}

// CreateBasin creates a basin (POST /basins); see ProvisionBasin.
func (c *Catalog) CreateBasin(ctx context.Context, req api.CreateBasinRequest, token string) (api.BasinInfo, error) {
	info, _, err := c.ProvisionBasin(ctx, req, token)
	return info, err
}

// ProvisionBasin creates a basin (POST /basins) and returns the provision
// result: created, or noop for a retry of the create that made it (the
// same request token and config; another config is 409, as in S2).
func (c *Catalog) ProvisionBasin(ctx context.Context, req api.CreateBasinRequest, token string) (api.BasinInfo, string, error) {
	var cfg api.BasinConfig
	if req.Config != nil {
		cfg = *req.Config
		if err := cfg.Validate(); err != nil {
			return api.BasinInfo{}, "", err
		}
	}
	e, created, err := c.createBasin(ctx, req.Basin, cfg, token)
	if err != nil {
		return api.BasinInfo{}, "", err
	}
	if created {
		return basinInfo(req.Basin, e.Row), api.ProvisionCreated, nil
	}
	if !sameCreate(createKey(token, cfg), token, e.Row.CreateKey, e.Row.RequestToken) {
		return api.BasinInfo{}, "", api.ResourceAlreadyExists("basin %q already exists", req.Basin)
	}
	return basinInfo(req.Basin, e.Row), api.ProvisionNoop, nil
}

// BasinConfig returns a basin's config (GET /basins/{b}).
func (c *Catalog) BasinConfig(ctx context.Context, name string) (api.BasinConfig, error) {
	if err := api.ValidateBasinName(name); err != nil {
		return api.BasinConfig{}, err
	}
	e, err := c.LiveBasin(ctx, name)
	if err != nil {
		return api.BasinConfig{}, err
	}
	return e.Row.Config, nil
}

// EnsureBasin creates the basin with the config, or sets the config of the
// live basin (PUT /basins/{b}). It returns the provision result: created,
// updated or noop.
func (c *Catalog) EnsureBasin(ctx context.Context, name string, req api.EnsureBasinRequest) (api.BasinInfo, string, error) {
	var cfg api.BasinConfig
	if req.Config != nil {
		cfg = *req.Config
		if err := cfg.Validate(); err != nil {
			return api.BasinInfo{}, "", err
		}
	}
	for {
		e, created, err := c.createBasin(ctx, name, cfg, "")
		if err != nil {
			return api.BasinInfo{}, "", err
		}
		if created {
			return basinInfo(name, e.Row), api.ProvisionCreated, nil
		}
		if bytes.Equal(meta.Encode(e.Row.Config), meta.Encode(cfg)) {
			return basinInfo(name, e.Row), api.ProvisionNoop, nil
		}
		row := e.Row
		row.Config = cfg
		ne, err := c.putBasin(ctx, name, row, meta.IfVer(e.Ver))
		if errors.Is(err, meta.ErrConditionFailed) {
			continue
		}
		if ne == nil {
			return api.BasinInfo{}, "", c.storageErr("update basin", err)
		}
		c.reconfigureLed(name)
		return basinInfo(name, ne.Row), api.ProvisionUpdated, err
	}
}

// ReconfigureBasin patches a basin's config (PATCH /basins/{b}).
func (c *Catalog) ReconfigureBasin(ctx context.Context, name string, r api.BasinReconfiguration) (api.BasinConfig, error) {
	if err := api.ValidateBasinName(name); err != nil {
		return api.BasinConfig{}, err
	}
	if err := r.Validate(); err != nil {
		return api.BasinConfig{}, err
	}
	for {
		c.dropBasin(name)
		e, err := c.LiveBasin(ctx, name)
		if err != nil {
			return api.BasinConfig{}, err
		}
		row := e.Row
		row.Config = row.Config.Reconfigure(r)
		if err := row.Config.Validate(); err != nil {
			return api.BasinConfig{}, err
		}
		ne, err := c.putBasin(ctx, name, row, meta.IfVer(e.Ver))
		if errors.Is(err, meta.ErrConditionFailed) {
			continue
		}
		if ne == nil {
			return api.BasinConfig{}, c.storageErr("reconfigure basin", err)
		}
		c.reconfigureLed(name)
		return ne.Row.Config, err
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
func (c *Catalog) DeleteBasin(ctx context.Context, name string) error {
	if err := api.ValidateBasinName(name); err != nil {
		return err
	}
	for range MaxAttempts {
		c.dropBasin(name)
		e, err := c.basin(ctx, name)
		if err != nil {
			return err
		}
		state := Gone
		if e != nil {
			state = LifecycleOf(e.Row.DeletedAt, c.cfg.DeletionPending, c.now())
		}
		switch state {
		case Gone:
			return api.BasinNotFound("basin %q not found", name)
		case Deleting:
			if err := c.tombstoneStreams(ctx, name, e.Row.ID, *e.Row.DeletedAt, true); err != nil {
				return err
			}
			c.lead.TellPeers(ctx, name)
			return api.BasinDeletionPending("basin %q is being deleted", name)
		}
		row := e.Row
		now := c.now().UTC()
		row.DeletedAt = &now
		_, err = c.putBasin(ctx, name, row, meta.IfVer(e.Ver))
		if errors.Is(err, meta.ErrConditionFailed) {
			continue
		}
		if err != nil {
			return c.storageErr("delete basin", err)
		}
		c.log.Info("basin deleted", "basin", name)
		if err := c.tombstoneStreams(ctx, name, e.Row.ID, now, false); err != nil {
			return err
		}
		c.lead.TellPeers(ctx, name)
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
func (c *Catalog) tombstoneStreams(ctx context.Context, basin, basinID string, at time.Time, again bool) error {
	pk := meta.StreamNameKey(basin, "").PK
	q := meta.Query{PK: pk, From: meta.StreamNamePrefix, To: meta.StreamNameEnd, Limit: 500}
	var (
		stop []StreamKey
		ids  []string
	)
	for {
		pg, err := c.meta.Query(ctx, q)
		if err != nil {
			return c.storageErr("list streams of deleted basin", err)
		}
		var items []meta.Item
		for _, it := range pg.Items {
			row, err := meta.DecodeStreamRow(it)
			if err != nil || row.BasinID != basinID || row.DeletedAt != nil {
				continue // not this basin's, or tombstoned when it was deleted
			}
			name := strings.TrimPrefix(it.SK, meta.StreamNamePrefix)
			if again {
				if err := c.finishDelete(ctx, basin, name, row.ID, at); err != nil {
					return err
				}
				continue
			}
			tk := meta.StreamTombstoneKey(row.ID)
			items = append(items, meta.Item{PK: tk.PK, SK: tk.SK, Val: meta.Encode(meta.Tombstone{Basin: basin, Name: name, DeletedAt: at})})
			// Registered for reclamation at once (see DeleteStream): a
			// basin re-created with its streams would hide these ids.
			rk := meta.ReclaimStreamKey(row.ID)
			items = append(items, meta.Item{PK: rk.PK, SK: rk.SK, Val: meta.Encode(meta.ReclaimStream{Basin: basin, Stream: row.ID})})
			stop = append(stop, StreamKey{basin, name})
			ids = append(ids, row.ID)
		}
		if len(items) > 0 {
			if err := c.meta.BatchPut(ctx, items); err != nil {
				return c.storageErr("write stream tombstones", err)
			}
		}
		// Streams led here stop now; peers leading others stop at their
		// next row check, and a re-create of a name retires its old lease.
		for i, id := range ids {
			c.lead.StopDeleted(ctx, id, stop[i].Name)
		}
		stop, ids = stop[:0], ids[:0]
		if pg.Next == "" {
			return nil
		}
		q.PageToken = pg.Next
	}
}

// ListBasins lists basins by name (GET /basins).
func (c *Catalog) ListBasins(ctx context.Context, req api.ListRequest) (api.ListBasinsResponse, error) {
	now := c.now()
	basins, more, err := scanRows(ctx, c, meta.BasinDirPK, "", "~", req, func(name string, it meta.Item) (api.BasinInfo, bool, error) {
		row, err := meta.DecodeBasinDirRow(it)
		if err != nil {
			return api.BasinInfo{}, false, err
		}
		if LifecycleOf(row.DeletedAt, c.cfg.DeletionPending, now) == Gone {
			return api.BasinInfo{}, false, nil
		}
		return api.BasinInfo{Name: name, CreatedAt: row.CreatedAt, DeletedAt: row.DeletedAt}, true, nil
	})
	if err != nil {
		return api.ListBasinsResponse{}, err
	}
	return api.ListBasinsResponse{Basins: basins, HasMore: more}, nil
}

// reconfigureLed re-applies the resolved timestamping of every cached
// stream of a basin that is led here after its default stream config
// changed.
func (c *Catalog) reconfigureLed(basin string) {
	c.mu.Lock()
	b := c.basins[basin]
	var entries []*StreamEntry
	for k, e := range c.streams {
		if k.Basin == basin {
			entries = append(entries, e)
		}
	}
	c.mu.Unlock()
	if b == nil {
		return
	}
	for _, e := range entries {
		c.lead.Reconfigured(context.Background(), e.Row.ID, e.Row.Config.Resolve(b.Row.Config.DefaultStreamConfig), false)
	}
}
