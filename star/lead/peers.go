package lead

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
)

// The settle duties of a star leaving (docs/design.md §9): a graceful close
// leaves durable settle markers for its unsettled chains and nudges its
// peers to settle them; a decommission settles them itself while it
// stands.

// SettlePath is the internal endpoint a closing star nudges its peers on.
const SettlePath = "/v1/starlog/settle"

// SettleRequest asks a star to settle what incarnation Incarnation of Star
// left on its chains (POST SettlePath), or, with Basin, to run the row
// check of a basin a peer deleted (RecheckBasin).
type SettleRequest struct {
	Star        string `json:"star"`
	Incarnation uint64 `json:"incarnation"`
	Basin       string `json:"basin,omitempty"`
}

// LeaveSettleMarkers writes a durable settle marker for each of this
// incarnation's chains whose head it still owns unsettled: the crash
// insurance of a graceful close (the janitor settles a marked chain even
// while the registry still says live), written once the loglets stopped
// so the epoch will never be written again. It returns how many it wrote.
func (ls *Leadership) LeaveSettleMarkers(ctx context.Context) (int, error) {
	me := chain.Incarnation(ls.me.Star, ls.me.Incarnation)
	wrote := 0
	var errs []error
	for _, class := range []meta.Class{meta.Standard, meta.Express} {
		ch := chain.New(ls.me.Star, class, me, ls.meta, ls.cfg.Objects)
		h, _, ok, err := ch.Head(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok || h.Owner != me || h.State == meta.HeadSettled {
			continue
		}
		k := meta.SettleDueKey(ls.me.Star, class)
		d := meta.SettleDue{Owner: me, Epoch: h.Epoch, At: time.Now().UnixMilli()}
		if _, err := ls.meta.Put(ctx, k.PK, k.SK, meta.Encode(d), meta.Always()); err != nil {
			errs = append(errs, fmt.Errorf("write settle marker of %s/%s: %w", ls.me.Star, class, err))
			continue
		}
		wrote++
	}
	return wrote, errors.Join(errs...)
}

// NudgePeers asks every other live star to settle this incarnation's
// chains now (best effort: the markers and the janitor are the
// guarantee). It returns how many peers took the nudge.
func (ls *Leadership) NudgePeers(ctx context.Context) int {
	ids, err := leader.Stars(ctx, ls.meta)
	if err != nil {
		ls.log.Warn("close: list peers to nudge", "err", err)
		return 0
	}
	body, _ := json.Marshal(SettleRequest{Star: ls.me.Star, Incarnation: ls.me.Incarnation})
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: ls.cfg.PeerTLS}}
	defer client.CloseIdleConnections()
	nudged := 0
	for _, id := range ids {
		if id == ls.me.Star {
			continue
		}
		reg, _, ok, err := leader.ReadRegistration(ctx, ls.meta, id)
		if err != nil || !ok || reg.Address == "" || !leader.Live(reg, reg.Incarnation, time.Now(), ls.cfg.DeadAfter) {
			continue
		}
		if err := nudge(ctx, client, reg.Address, body, ls.cfg.PeerHeader); err != nil {
			ls.log.Warn("close: nudge peer to settle", "peer", id, "err", err)
			continue
		}
		nudged++
	}
	return nudged
}

func nudge(ctx context.Context, client *http.Client, addr string, body []byte, hdr http.Header) error {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(addr, "/")+SettlePath, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	return nil
}

// tellPeersTimeout bounds a basin delete's wait for one peer's answer.
const tellPeersTimeout = 2 * time.Second

// TellPeers asks every other live star to run the row check of a basin
// this star deleted (POST SettlePath {basin}), and waits for their answers
// (2 s each at most, all at once): a reachable peer stops leading the
// basin's streams before the delete answers. Best effort: a peer that does
// not answer stops at its next row check, and a re-create fences it
// (retireLease).
func (ls *Leadership) TellPeers(ctx context.Context, basin string) {
	ids, err := leader.Stars(ctx, ls.meta)
	if err != nil {
		ls.log.Warn("basin delete: list peers to tell", "basin", basin, "err", err)
		return
	}
	body, _ := json.Marshal(SettleRequest{Basin: basin})
	client := &http.Client{Timeout: tellPeersTimeout, Transport: &http.Transport{TLSClientConfig: ls.cfg.PeerTLS}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	for _, id := range ids {
		if id == ls.me.Star {
			continue
		}
		reg, _, ok, err := leader.ReadRegistration(ctx, ls.meta, id)
		if err != nil || !ok || reg.Address == "" || !leader.Live(reg, reg.Incarnation, time.Now(), ls.cfg.DeadAfter) {
			continue
		}
		wg.Go(func() {
			if err := nudge(ctx, client, reg.Address, body, ls.cfg.PeerHeader); err != nil {
				ls.log.Warn("basin delete: a peer was not told (it stops at its next row check)", "basin", basin, "peer", id, "err", err)
			}
		})
	}
	wg.Wait()
}

// LiveStars lists the stars that take leases: in the directory,
// registered, state live (not draining), heartbeat younger than the
// dead-after bound, and with an address to forward to; with the streams
// each led at its last heartbeat.
func (ls *Leadership) LiveStars(ctx context.Context) ([]StarLoad, error) {
	ids, err := leader.Stars(ctx, ls.meta)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var stars []StarLoad
	for _, id := range ids {
		reg, _, ok, err := leader.ReadRegistration(ctx, ls.meta, id)
		if err != nil {
			return nil, err
		}
		if !ok || reg.State != meta.StarLive || reg.Address == "" || !leader.Live(reg, reg.Incarnation, now, ls.cfg.DeadAfter) {
			continue
		}
		stars = append(stars, StarLoad{Star: id, Leads: reg.Leads})
	}
	return stars, nil
}
