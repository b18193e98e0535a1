package subs

import (
	"context"
	"encoding/json"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/starlog/starlog/shared/meta"
)

// What the tests that drive the subscriptions through a real handler
// (package subs_test: star/durable imports this package, so only an
// external test can import it back) see of the driver.

// Error codes of the control API.
const (
	CodeFenced       = codeFenced
	CodeTokenInvalid = codeTokenInvalid
)

// PassKeys makes the keys' periodic pass now (a reread, and a rotation or
// a drop when one is due).
func (m *Manager) PassKeys(ctx context.Context) error { return m.keys.Pass(ctx) }

// KeyPeriod is the rotation period the keys run with.
func (m *Manager) KeyPeriod() time.Duration { return m.keys.Period() }

// Busy reports whether an append found the subscription's wake in flight.
func (m *Manager) Busy(basin, root, id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.busy[subKey(basin, root, id)]
	return ok
}

// Passes is the count of passes by trigger and result.
func (m *Manager) Passes(trigger, result string) float64 {
	return testutil.ToFloat64(m.passes.WithLabelValues(trigger, result))
}

// SubKey is a subscription's metastore row.
func SubKey(basin, root, id string) meta.Key { return subKey(basin, root, id) }

// EndWake is what a callback on another star does to a stored row: the
// snapshot acked and the wake in flight (wakeID) finished.
func EndWake(val []byte) (wakeID string, ended []byte, err error) {
	var row subRow
	if err := json.Unmarshal(val, &row); err != nil {
		return "", nil, err
	}
	wakeID = row.WakeID
	row.ackSnapshot()
	row.finishWake()
	ended, err = json.Marshal(&row)
	return wakeID, ended, err
}
