package catalog

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
)

// Stream returns the cached or stored row of a stream of basin b; nil when
// it does not exist in this incarnation of the basin. A row that names
// another incarnation of the basin than b is judged on the basin row read
// again after it (b may be a stale cache entry): if that is the row's
// basin, the row is live in it and the fresh basin comes back with it;
// otherwise the row is a stream of an earlier basin.
func (c *Catalog) Stream(ctx context.Context, b *BasinEntry, basin, name string) (*BasinEntry, *StreamEntry, error) {
	key := StreamKey{basin, name}
	c.mu.Lock()
	e := c.streams[key]
	c.mu.Unlock()
	// Only a live row is trusted from the cache: a deleted one (or one of
	// an earlier basin) may have been re-created by a peer since, and
	// answering from it would make this star 404 a stream that exists.
	if e == nil || e.Row.DeletedAt != nil || e.Row.BasinID != b.Row.ID {
		var err error
		if e, err = c.readStream(ctx, key); err != nil || e == nil {
			return b, nil, err
		}
	}
	if e.Row.BasinID == b.Row.ID {
		return b, e, nil
	}
	fresh, err := c.rereadBasin(ctx, basin)
	if err != nil {
		return nil, nil, err
	}
	if fresh.Row.ID != e.Row.BasinID {
		return fresh, nil, nil // a stream of an earlier basin of this name
	}
	return fresh, e, nil
}

// rereadBasin reads a live basin's row again because a row read after the
// cached one named another incarnation of it (counted as "stale").
func (c *Catalog) rereadBasin(ctx context.Context, basin string) (*BasinEntry, error) {
	c.m.basinRereads.WithLabelValues("stale").Inc()
	fresh, err := c.readBasin(ctx, basin)
	if err != nil {
		return nil, err
	}
	return c.checkBasin(basin, fresh)
}

// readStream reads the stream's name row and caches it; nil when there is
// none.
func (c *Catalog) readStream(ctx context.Context, key StreamKey) (*StreamEntry, error) {
	e, err := c.fetchStream(ctx, key)
	if e != nil {
		c.cacheStream(e)
	}
	return e, err
}

// fetchStream is readStream without caching what it read: the row check
// reads the row of every stream it leads, and a stream the idle release
// forgets meanwhile must not come back into the cache through it.
func (c *Catalog) fetchStream(ctx context.Context, key StreamKey) (*StreamEntry, error) {
	k := meta.StreamNameKey(key.Basin, key.Name)
	it, err := c.meta.Get(ctx, k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, c.storageErr("read stream", err)
	}
	row, err := meta.DecodeStreamRow(it)
	if err != nil {
		return nil, c.storageErr("decode stream", err)
	}
	return &StreamEntry{Key: key, Row: row, Ver: it.Ver}, nil
}

// FreshRows reads e's basin and stream rows again, for a star about to
// take the stream on: its cached rows may be stale, since a peer that led
// the stream may have deleted or reconfigured it. Off the ack path (an
// open does metastore work anyway), it fails as the request would on the
// rows as they stand.
func (c *Catalog) FreshRows(ctx context.Context, e *StreamEntry) (*BasinEntry, *StreamEntry, error) {
	b, err := c.readBasin(ctx, e.Key.Basin)
	if err != nil {
		return nil, nil, err
	}
	if b, err = c.checkBasin(e.Key.Basin, b); err != nil {
		return nil, nil, err
	}
	cur, err := c.readStream(ctx, e.Key)
	if err != nil {
		return nil, nil, err
	}
	state := Gone
	if cur != nil && cur.Row.BasinID == b.Row.ID {
		state = LifecycleOf(cur.Row.DeletedAt, c.cfg.DeletionPending, c.now())
	}
	switch {
	case state == Deleting:
		return nil, nil, api.StreamDeletionPending("stream %q is being deleted", e.Key.Name)
	case state == Gone:
		return nil, nil, api.StreamNotFound("stream %q not found in basin %q", e.Key.Name, e.Key.Basin)
	case cur.Row.ID != e.Row.ID:
		return nil, nil, api.Unavailable("stream %q was replaced while this star opened it; retry", e.Key.Name)
	}
	return b, cur, nil
}

// A row's version only grows (this package never deletes the row, and a
// create drops the cache entry before it writes), so a racing reader's
// older snapshot never replaces a newer one.
func (c *Catalog) cacheStream(e *StreamEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.streams[e.Key]; cur == nil || cur.Ver <= e.Ver {
		c.streams[e.Key] = e
	}
}

func (c *Catalog) dropStream(key StreamKey) {
	c.mu.Lock()
	delete(c.streams, key)
	c.mu.Unlock()
}

// AutoCreate says whether a missing stream is created, and how.
type AutoCreate struct {
	OnAppend, OnRead bool
	// Config is the s2-stream-config header's config, if any.
	Config *api.StreamConfig
	// Admit, if set, is the request's verdict on a new stream of the
	// resolved config: a request it rejects creates nothing (the node's
	// admitNew).
	Admit func(api.EffectiveStreamConfig) error
	// Lazy: a stream that would be created is not; LiveStream returns the
	// basin and a nil stream, for the caller to create it later (an append
	// session, on its first accepted input).
	Lazy bool
}

// StreamID is the id of the stream now under the name: a stream deleted
// and created again under it has another (so state derived from one
// stream's records can tell it is not the other's).
func (c *Catalog) StreamID(ctx context.Context, basin, name string) (string, error) {
	_, e, err := c.LiveStream(ctx, basin, name, AutoCreate{})
	if err != nil {
		return "", err
	}
	return e.Row.ID, nil
}

// LiveStream returns a stream that exists and is not being deleted,
// creating it when the basin's config asks for that on this kind of access.
func (c *Catalog) LiveStream(ctx context.Context, basin, name string, ac AutoCreate) (*BasinEntry, *StreamEntry, error) {
	if err := api.ValidateStreamName(name); err != nil {
		return nil, nil, err
	}
	b, err := c.LiveBasin(ctx, basin)
	if err != nil {
		return nil, nil, err
	}
	b, e, err := c.Stream(ctx, b, basin, name)
	if err != nil {
		return nil, nil, err
	}
	state := Gone
	if e != nil {
		state = LifecycleOf(e.Row.DeletedAt, c.cfg.DeletionPending, c.now())
	}
	switch state {
	case Alive:
		return b, e, nil
	case Deleting:
		return nil, nil, api.StreamDeletionPending("stream %q is being deleted", name)
	}
	if ac.OnAppend && b.Row.Config.CreateStreamOnAppend || ac.OnRead && b.Row.Config.CreateStreamOnRead {
		if ac.Lazy {
			return b, nil, nil
		}
		var cfg api.StreamConfig
		if ac.Config != nil {
			cfg = *ac.Config
		}
		if ac.Admit != nil {
			if err := ac.Admit(cfg.Resolve(b.Row.Config.DefaultStreamConfig)); err != nil {
				return nil, nil, err
			}
		}
		b, e, _, err := c.createStream(ctx, b, basin, name, cfg, "")
		if err != nil {
			return nil, nil, err
		}
		return b, e, nil
	}
	return nil, nil, api.StreamNotFound("stream %q not found in basin %q", name, basin)
}

// createStream creates stream name in basin b with the requested config
// cfg, or returns the live stream that holds the name (created false). A
// name whose stream is being deleted is 409 stream_deletion_pending until
// the deletion is no longer pending, as in S2. The row stores cfg resolved
// over the basin's default stream config as it is now (storedConfig).
//
// What a create overwrites is judged on the basin row read after the name
// row, never on b alone (b may be a cached entry of an incarnation of the
// basin since deleted): a row of another basin id is a stream of an
// earlier basin only if that is not the basin now. It returns the basin
// it judged by: b, or b's row as it is now.
func (c *Catalog) createStream(ctx context.Context, b *BasinEntry, basin, name string, cfg api.StreamConfig, token string) (*BasinEntry, *StreamEntry, bool, error) {
	key := StreamKey{basin, name}
	for attempt := 0; ; attempt++ {
		if attempt == MaxAttempts {
			return nil, nil, false, api.Unavailable("stream %q: its rows kept changing while this star created it; retry", name)
		}
		c.dropStream(key)
		k := meta.StreamNameKey(basin, name)
		cond := meta.IfAbsent()
		var old *meta.StreamRow // the row this create replaces
		it, err := c.meta.Get(ctx, k.PK, k.SK)
		switch {
		case err == nil:
			row, err := meta.DecodeStreamRow(it)
			if err != nil {
				return nil, nil, false, c.storageErr("decode stream", err)
			}
			if row.BasinID == b.Row.ID {
				switch LifecycleOf(row.DeletedAt, c.cfg.DeletionPending, c.now()) {
				case Alive:
					e := &StreamEntry{Key: key, Row: row, Ver: it.Ver}
					c.cacheStream(e)
					return b, e, false, nil
				case Deleting:
					if !replacesDeleting(ctx) {
						return nil, nil, false, api.StreamDeletionPending("stream %q is being deleted", name)
					}
				}
			}
			cond, old = meta.IfVer(it.Ver), &row
		case !errors.Is(err, meta.ErrNotFound):
			return nil, nil, false, c.storageErr("read stream", err)
		}
		// The basin as it is now, read after the name row: a row of another
		// basin id is then an earlier basin's (ids are never reused), and
		// a new row never joins an incarnation of the basin already gone.
		fresh, err := c.readBasin(ctx, basin)
		if err != nil {
			return nil, nil, false, err
		}
		if fresh, err = c.checkBasin(basin, fresh); err != nil {
			return nil, nil, false, err
		}
		if fresh.Row.ID != b.Row.ID {
			c.m.basinRereads.WithLabelValues("stale").Inc()
			b = fresh // judge the name row again against the basin of now
			continue
		}
		b = fresh
		if q := b.Row.Config.Quotas; q != nil && c.admitCreate != nil {
			if err := c.admitCreate(ctx, basin, b.Row.ID, *q); err != nil {
				return nil, nil, false, err
			}
		}
		if old != nil {
			// The name moves to a new id: the old one (deleted, or an
			// earlier basin's) is first registered for reclamation (a
			// delete that stopped short is finished here, lest the new row
			// hide the old id for good), and its lease retired, so no star
			// acknowledges into it under the name's new stream.
			at := c.now().UTC()
			if old.DeletedAt != nil {
				at = *old.DeletedAt
			}
			if err := c.registerDeleted(ctx, basin, name, old.ID, at); err != nil {
				return nil, nil, false, err
			}
			if err := c.lead.RetireLease(ctx, old.ID, name); err != nil {
				return nil, nil, false, err
			}
		}
		stored := storedConfig(b, cfg)
		row := meta.StreamRow{ID: c.ids(), BasinID: b.Row.ID, Config: stored, CreatedAt: c.now().UTC(),
			RequestToken: token, CreateKey: createKey(token, cfg)}
		if c := b.Row.Config.StreamCipher; c != nil {
			row.Cipher = *c
		}
		// The identity row goes first: once the name row exists the stream
		// can take appends, and the auditor needs the basin of every stream
		// id it meets in a chain. A lost race below orphans it (an id never
		// used), which is harmless.
		ik := meta.StreamMetaKey(row.ID)
		ident := meta.StreamMeta{Basin: basin, Name: name, Class: meta.Class(*stored.StorageClass)}
		if _, err := c.meta.Put(ctx, ik.PK, ik.SK, meta.Encode(ident), meta.IfAbsent()); err != nil {
			return nil, nil, false, c.storageErr("write stream identity", err)
		}
		ver, err := c.meta.Put(ctx, k.PK, k.SK, meta.Encode(row), cond)
		if errors.Is(err, meta.ErrConditionFailed) {
			if err := ctx.Err(); err != nil {
				return nil, nil, false, ContextError(err)
			}
			continue
		}
		if err != nil {
			return nil, nil, false, c.storageErr("create stream", err)
		}
		e := &StreamEntry{Key: key, Row: row, Ver: ver}
		c.cacheStream(e)
		c.log.Info("stream created", "basin", basin, "stream", name, "id", row.ID)
		return b, e, true, nil
	}
}

// MaxAttempts bounds a catalog write's retries of lost races.
const MaxAttempts = 16

func streamInfo(e *StreamEntry) api.StreamInfo {
	return api.StreamInfo{Name: e.Key.Name, CreatedAt: e.Row.CreatedAt, DeletedAt: e.Row.DeletedAt, Cipher: e.Row.Cipher}
}

// StreamCipher is the cipher of a stream's records ("" for none): the
// live stream's, or, for a stream an append or read would create, the
// basin's stream_cipher. Errors are those of the lookup (a stream that is
// missing and would not be created is not an error here: the request's
// own call answers for it).
func (c *Catalog) StreamCipher(ctx context.Context, basin, name string) (string, error) {
	b, e, err := c.LiveStream(ctx, basin, name, AutoCreate{OnAppend: true, OnRead: true, Lazy: true})
	if err != nil {
		if ae, ok := errors.AsType[*api.Error](err); ok && ae.Code == api.CodeStreamNotFound {
			return "", nil
		}
		return "", err
	}
	if e != nil {
		return e.Row.Cipher, nil
	}
	if c := b.Row.Config.StreamCipher; c != nil {
		return *c, nil
	}
	return "", nil
}

// storedConfig is what a stream row stores for the config cfg asked for:
// cfg resolved over basin b's default stream config and the built-in
// defaults, every field set. S2 copies the basin default into the stream
// at create and reconfiguration, so changing the default later leaves
// existing streams as they are.
func storedConfig(b *BasinEntry, cfg api.StreamConfig) api.StreamConfig {
	return cfg.Resolve(b.Row.Config.DefaultStreamConfig).StreamConfig()
}

// CreateStream creates a stream (POST /streams); see ProvisionStream.
func (c *Catalog) CreateStream(ctx context.Context, basin string, req api.CreateStreamRequest, token string) (api.StreamInfo, error) {
	info, _, err := c.ProvisionStream(ctx, basin, req, token)
	return info, err
}

// ProvisionStream creates a stream (POST /streams) and returns the
// provision result: created, or noop for a retry of the create that made
// it (same request token, same config, as S2 keys it).
func (c *Catalog) ProvisionStream(ctx context.Context, basin string, req api.CreateStreamRequest, token string) (api.StreamInfo, string, error) {
	if err := api.ValidateStreamName(req.Stream); err != nil {
		return api.StreamInfo{}, "", err
	}
	var cfg api.StreamConfig
	if req.Config != nil {
		cfg = *req.Config
		if err := cfg.Validate(); err != nil {
			return api.StreamInfo{}, "", err
		}
	}
	b, err := c.LiveBasin(ctx, basin)
	if err != nil {
		return api.StreamInfo{}, "", err
	}
	_, e, created, err := c.createStream(ctx, b, basin, req.Stream, cfg, token)
	if err != nil {
		return api.StreamInfo{}, "", err
	}
	if created {
		return streamInfo(e), api.ProvisionCreated, nil
	}
	if !sameCreate(createKey(token, cfg), token, e.Row.CreateKey, e.Row.RequestToken) {
		return api.StreamInfo{}, "", api.ResourceAlreadyExists("stream %q already exists", req.Stream)
	}
	return streamInfo(e), api.ProvisionNoop, nil
}

// StreamConfig returns a stream's fully resolved config (GET /streams/{s}).
func (c *Catalog) StreamConfig(ctx context.Context, basin, name string) (api.StreamConfig, error) {
	b, e, err := c.LiveStream(ctx, basin, name, AutoCreate{})
	if err != nil {
		return api.StreamConfig{}, err
	}
	return e.Row.Config.Resolve(b.Row.Config.DefaultStreamConfig).StreamConfig(), nil
}

// EnsureStream creates the stream with cfg or sets the live stream's
// config to cfg (PUT /streams/{s}); it returns the provision result.
func (c *Catalog) EnsureStream(ctx context.Context, basin, name string, cfg api.StreamConfig) (api.StreamInfo, string, error) {
	if err := api.ValidateStreamName(name); err != nil {
		return api.StreamInfo{}, "", err
	}
	if err := cfg.Validate(); err != nil {
		return api.StreamInfo{}, "", err
	}
	b, err := c.LiveBasin(ctx, basin)
	if err != nil {
		return api.StreamInfo{}, "", err
	}
	for {
		var e *StreamEntry
		var created bool
		b, e, created, err = c.createStream(ctx, b, basin, name, cfg, "")
		if err != nil {
			return api.StreamInfo{}, "", err
		}
		if created {
			return streamInfo(e), api.ProvisionCreated, nil
		}
		want := storedConfig(b, cfg)
		if bytes.Equal(meta.Encode(e.Row.Config), meta.Encode(want)) {
			return streamInfo(e), api.ProvisionNoop, nil
		}
		ne, err := c.updateStream(ctx, b, e, func(r *meta.StreamRow) { r.Config = want })
		if errors.Is(err, meta.ErrConditionFailed) {
			continue
		}
		if err != nil {
			return api.StreamInfo{}, "", err
		}
		return streamInfo(ne), api.ProvisionUpdated, nil
	}
}

// updateStream writes a changed stream row over e's version and applies
// the new timestamping to the led stream. ErrConditionFailed means the row
// moved: re-read and retry.
func (c *Catalog) updateStream(ctx context.Context, b *BasinEntry, e *StreamEntry, change func(*meta.StreamRow)) (*StreamEntry, error) {
	row := e.Row
	change(&row)
	k := meta.StreamNameKey(e.Key.Basin, e.Key.Name)
	ver, err := c.meta.Put(ctx, k.PK, k.SK, meta.Encode(row), meta.IfVer(e.Ver))
	if errors.Is(err, meta.ErrConditionFailed) {
		c.dropStream(e.Key)
		return nil, err
	}
	if err != nil {
		return nil, c.storageErr("update stream", err)
	}
	ne := &StreamEntry{Key: e.Key, Row: row, Ver: ver}
	c.cacheStream(ne)
	if row.DeletedAt == nil {
		// Timestamping applies at once; a new storage class reopens the
		// stream on its chain (Leader.Reconfigured).
		c.lead.Reconfigured(ctx, row.ID, row.Config.Resolve(b.Row.Config.DefaultStreamConfig), true)
	}
	return ne, nil
}

// ReconfigureStream patches a stream's config (PATCH /streams/{s}) and
// returns the fully resolved result.
func (c *Catalog) ReconfigureStream(ctx context.Context, basin, name string, r api.StreamReconfiguration) (api.StreamConfig, error) {
	if err := r.Validate(); err != nil {
		return api.StreamConfig{}, err
	}
	for {
		b, e, err := c.LiveStream(ctx, basin, name, AutoCreate{})
		if err != nil {
			return api.StreamConfig{}, err
		}
		cfg := e.Row.Config.Reconfigure(r)
		if err := cfg.Validate(); err != nil {
			return api.StreamConfig{}, err
		}
		// A field the patch unsets takes the basin's default as it is now.
		cfg = storedConfig(b, cfg)
		ne, err := c.updateStream(ctx, b, e, func(row *meta.StreamRow) { row.Config = cfg })
		if errors.Is(err, meta.ErrConditionFailed) {
			continue
		}
		if err != nil {
			return api.StreamConfig{}, err
		}
		return ne.Row.Config.Resolve(b.Row.Config.DefaultStreamConfig).StreamConfig(), nil
	}
}

// DeleteStream starts deleting a stream (DELETE /streams/{s}, 202): the
// name row gets deleted_at (the commit point), then finishDelete writes
// the rest. A delete that stopped after its mark (a failed write, a lost
// reply, a crash) is finished by any retry, which still answers 409
// stream_deletion_pending, by a create that takes the name, or by the
// janitor's retention pass.
func (c *Catalog) DeleteStream(ctx context.Context, basin, name string) error {
	if err := api.ValidateStreamName(name); err != nil {
		return err
	}
	for range MaxAttempts {
		b, err := c.LiveBasin(ctx, basin)
		if err != nil {
			return err
		}
		b, e, err := c.Stream(ctx, b, basin, name)
		if err != nil {
			return err
		}
		state := Gone
		if e != nil {
			state = LifecycleOf(e.Row.DeletedAt, c.cfg.DeletionPending, c.now())
		}
		switch state {
		case Gone:
			return api.StreamNotFound("stream %q not found in basin %q", name, basin)
		case Deleting:
			if err := c.finishDelete(ctx, basin, name, e.Row.ID, *e.Row.DeletedAt); err != nil {
				return err
			}
			return api.StreamDeletionPending("stream %q is being deleted", name)
		}
		now := c.now().UTC()
		_, err = c.updateStream(ctx, b, e, func(r *meta.StreamRow) { r.DeletedAt = &now })
		if errors.Is(err, meta.ErrConditionFailed) {
			continue
		}
		if err != nil {
			return err
		}
		if err := c.finishDelete(ctx, basin, name, e.Row.ID, now); err != nil {
			return err
		}
		c.log.Info("stream deleted", "basin", basin, "stream", name, "id", e.Row.ID)
		return nil
	}
	return api.Unavailable("stream %q kept changing while this star deleted it; retry", name)
}

// finishDelete writes what follows a stream's deletion mark: its
// tombstone and its reclamation row (registerDeleted), then this star
// stops leading it and retires its lease (stopDeleted). Any retry may run
// it.
func (c *Catalog) finishDelete(ctx context.Context, basin, name, id string, at time.Time) error {
	if err := c.registerDeleted(ctx, basin, name, id, at); err != nil {
		return err
	}
	c.lead.StopDeleted(ctx, id, name)
	return nil
}

// registerDeleted writes deleted stream id's tombstone (no settle stages
// its records again) and its reclamation row, each if absent, so any
// retry may write them again. The id is registered at once, not left to
// the janitor: found only from the name row, it would be hidden by a
// stream created under the name before the janitor's next run. Unlike
// the janitor's settle.ForgetStream it registers an id whose tombstone
// already stands: a delete may have stopped between the two, and a
// reclamation run again finds nothing to do but delete the lease a
// retire left. Callers read the name row deleted, or naming an earlier
// basin on a basin row read after it, first: a live id is never
// registered.
func (c *Catalog) registerDeleted(ctx context.Context, basin, name, id string, at time.Time) error {
	tk := meta.StreamTombstoneKey(id)
	ts := meta.Tombstone{Basin: basin, Name: name, DeletedAt: at}
	if _, err := c.meta.Put(ctx, tk.PK, tk.SK, meta.Encode(ts), meta.IfAbsent()); err != nil && !errors.Is(err, meta.ErrConditionFailed) {
		return c.storageErr("write stream tombstone", err)
	}
	rk := meta.ReclaimStreamKey(id)
	if _, err := c.meta.Put(ctx, rk.PK, rk.SK, meta.Encode(meta.ReclaimStream{Basin: basin, Stream: id}), meta.IfAbsent()); err != nil && !errors.Is(err, meta.ErrConditionFailed) {
		return c.storageErr("register deleted stream", err)
	}
	return nil
}

// ListStreams lists a basin's streams by name (GET /streams).
func (c *Catalog) ListStreams(ctx context.Context, basin string, req api.ListRequest) (api.ListStreamsResponse, error) {
	b, err := c.LiveBasin(ctx, basin)
	if err != nil {
		return api.ListStreamsResponse{}, err
	}
	now := c.now()
	pk := meta.StreamNameKey(basin, "").PK
	// "s$" sorts right after every "s#…" key and is never a key itself.
	list, more, err := scanRows(ctx, c, pk, meta.StreamNamePrefix, meta.StreamNameEnd, req, func(name string, it meta.Item) (api.StreamInfo, bool, error) {
		row, err := meta.DecodeStreamRow(it)
		if err != nil {
			return api.StreamInfo{}, false, err
		}
		if row.BasinID != b.Row.ID || LifecycleOf(row.DeletedAt, c.cfg.DeletionPending, now) == Gone {
			return api.StreamInfo{}, false, nil
		}
		return api.StreamInfo{Name: name, CreatedAt: row.CreatedAt, DeletedAt: row.DeletedAt, Cipher: row.Cipher}, true, nil
	})
	if err != nil {
		return api.ListStreamsResponse{}, err
	}
	return api.ListStreamsResponse{Streams: list, HasMore: more}, nil
}

// StreamStorageBytes is what the metastore says a live stream stores: the
// metered bytes its refs cover, from its oldest ref (counted whole, as its
// object bytes) to its newest. Records not yet absorbed into refs are not
// counted, nor what retention has trimmed. It serves S2's storage metric.
func (c *Catalog) StreamStorageBytes(ctx context.Context, basin, name string) (uint64, error) {
	b, err := c.LiveBasin(ctx, basin)
	if err != nil {
		return 0, err
	}
	_, e, err := c.Stream(ctx, b, basin, name)
	if err != nil {
		return 0, err
	}
	if e == nil || LifecycleOf(e.Row.DeletedAt, c.cfg.DeletionPending, c.now()) != Alive {
		return 0, api.StreamNotFound("stream %q not found in basin %q", name, basin)
	}
	return c.storedBytes(ctx, e.Row.ID)
}

// BasinStorageBytes sums StreamStorageBytes over a basin's live streams.
func (c *Catalog) BasinStorageBytes(ctx context.Context, basin string) (uint64, error) {
	b, err := c.LiveBasin(ctx, basin)
	if err != nil {
		return 0, err
	}
	pk := meta.StreamNameKey(basin, "").PK
	q := meta.Query{PK: pk, From: meta.StreamNamePrefix, To: meta.StreamNameEnd, Limit: 500}
	now := c.now()
	var total uint64
	for {
		pg, err := c.meta.Query(ctx, q)
		if err != nil {
			return 0, c.storageErr("list streams", err)
		}
		for _, it := range pg.Items {
			row, err := meta.DecodeStreamRow(it)
			if err != nil || row.BasinID != b.Row.ID || LifecycleOf(row.DeletedAt, c.cfg.DeletionPending, now) != Alive {
				continue
			}
			sb, err := c.storedBytes(ctx, row.ID)
			if err != nil {
				return 0, err
			}
			total += sb
		}
		if pg.Next == "" {
			return total, nil
		}
		q.PageToken = pg.Next
	}
}

// storedBytes reads a stream's oldest and newest refs (see
// StreamStorageBytes).
func (c *Catalog) storedBytes(ctx context.Context, id string) (uint64, error) {
	q := meta.Query{PK: meta.RefKey(id, 0).PK, From: meta.RefPrefix, To: meta.RefPrefix + "~", Limit: 1}
	first, err := c.meta.Query(ctx, q)
	if err != nil {
		return 0, c.storageErr("read refs", err)
	}
	if len(first.Items) == 0 {
		return 0, nil
	}
	q.Backward = true
	last, err := c.meta.Query(ctx, q)
	if err != nil || len(last.Items) == 0 {
		return 0, c.storageErr("read refs", cmp.Or(err, errors.New("refs vanished")))
	}
	var lo, hi meta.Ref
	if err := meta.Decode(first.Items[0].Val, &lo); err != nil {
		return 0, c.storageErr("decode ref", err)
	}
	if err := meta.Decode(last.Items[0].Val, &hi); err != nil {
		return 0, c.storageErr("decode ref", err)
	}
	var own uint64 // the oldest ref's own bytes: its cumulative count starts below it
	switch {
	case lo.Settled != nil:
		own = lo.Settled.Bytes
	case lo.Span != nil:
		for _, s := range lo.Span.Slots {
			own += s.Length
		}
	}
	if hi.CumBytes < lo.CumBytes {
		return own, nil
	}
	return hi.CumBytes - lo.CumBytes + own, nil
}

type replaceDeletingKey struct{}

// ReplaceDeleting marks ctx so that a stream created through it
// (EnsureStream) replaces a stream of the same name whose deletion is
// pending at once, with a new id, instead of answering 409
// stream_deletion_pending as S2 does. The Durable Streams face
// (star/durable) uses it: its protocol re-creates a deleted stream's URL
// at once.
func ReplaceDeleting(ctx context.Context) context.Context {
	return context.WithValue(ctx, replaceDeletingKey{}, true)
}

func replacesDeleting(ctx context.Context) bool { return ctx.Value(replaceDeletingKey{}) != nil }
