package subs

import (
	"context"
	"errors"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/durable/subs/signing"
)

// The operators' view of the subscription keys (star/server serves it on
// its internal routes). Errors are *api.Error.

// Keys lists the keys the row holds now (read, not this
// star's cache), without their secrets; none before a star first needed
// them.
func (m *Manager) Keys(ctx context.Context) ([]signing.KeyInfo, error) {
	k := signing.RowKey(m.basin)
	it, err := m.meta.Get(ctx, k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		return []signing.KeyInfo{}, nil
	}
	if err != nil {
		return nil, keysAPIError(&metaError{err})
	}
	s, err := signing.Decode(it.Val)
	if err != nil {
		return nil, err
	}
	return s.Info(m.keys.Now()), nil
}

// RotateKeys adds a key now and returns the keys. Without
// emergency it is a scheduled rotation brought forward: the key is
// published at once and signs after the publish lead. An emergency (a
// leaked key) makes the new key sign at once and drops every other: wake
// tokens in flight are refused (their wakes are woken again once their
// leases run out) and receivers must fetch the JWK Set again. Other stars
// follow at their next reread (signing.KeyReload).
func (m *Manager) RotateKeys(ctx context.Context, emergency bool) ([]signing.KeyInfo, error) {
	s, err := m.keys.Rotate(ctx, emergency)
	if err != nil {
		return nil, keysAPIError(err)
	}
	return s.Info(m.keys.Now()), nil
}

func keysAPIError(err error) error {
	switch {
	case errors.Is(err, signing.ErrTooManyKeys):
		return api.Invalid("%s, or rotate in an emergency", err.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return api.Unavailable("the metastore did not answer in time; retry")
	}
	if _, ok := errors.AsType[*signing.MetaError](err); ok {
		return api.Unavailable("the metastore is unavailable; retry")
	}
	if _, ok := errors.AsType[*metaError](err); ok {
		return api.Unavailable("the metastore is unavailable; retry")
	}
	return err
}
