package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
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

// SettleFor starts settling both chains of incarnation inc of star (and
// its earlier incarnations) in the star-local settle runner, joining a run
// already going, and returns without waiting: a nudge from a closing peer,
// so settlement starts before the first open of one of its streams has to
// wait for it. A head minted by a later incarnation is left alone.
func (n *Node) SettleFor(star string, inc uint64) error {
	if err := ValidateStarID(star); err != nil {
		return api.Invalid("settle request: %v", err)
	}
	if star == n.cfg.StarID {
		return api.Invalid("settle request: star %s settles its own chains when it starts", star)
	}
	for _, class := range []meta.Class{meta.Standard, meta.Express} {
		if _, err := n.lease.runner.start(settleKey{star: star, class: class, inc: inc}, "nudge", n.settleFn); err != nil {
			return api.Unavailable("this star is closing")
		}
	}
	n.log.Info("settling a closed peer's chains", "peer", star, "incarnation", inc)
	return nil
}

// leaveSettleMarkers writes a durable settle marker for each of this
// incarnation's chains whose head it still owns unsettled: the crash
// insurance of a graceful close (the janitor settles a marked chain even
// while the registry still says live), written once the loglets stopped
// so the epoch will never be written again. It returns how many it wrote.
func (n *Node) leaveSettleMarkers(ctx context.Context) (int, error) {
	me := chain.Incarnation(n.cfg.StarID, n.regn.Incarnation)
	wrote := 0
	var errs []error
	for _, class := range []meta.Class{meta.Standard, meta.Express} {
		ch := chain.New(n.cfg.StarID, class, me, n.meta, n.objects)
		h, _, ok, err := ch.Head(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok || h.Owner != me || h.State == meta.HeadSettled {
			continue
		}
		k := meta.SettleDueKey(n.cfg.StarID, class)
		d := meta.SettleDue{Owner: me, Epoch: h.Epoch, At: time.Now().UnixMilli()}
		if _, err := n.meta.Put(ctx, k.PK, k.SK, meta.Encode(d), meta.Always()); err != nil {
			errs = append(errs, fmt.Errorf("write settle marker of %s/%s: %w", n.cfg.StarID, class, err))
			continue
		}
		wrote++
	}
	return wrote, errors.Join(errs...)
}

// nudgePeers asks every other live star to settle this incarnation's
// chains now (best effort: the markers and the janitor are the
// guarantee). It returns how many peers took the nudge.
func (n *Node) nudgePeers(ctx context.Context) int {
	ids, err := leader.Stars(ctx, n.meta)
	if err != nil {
		n.log.Warn("close: list peers to nudge", "err", err)
		return 0
	}
	body, _ := json.Marshal(SettleRequest{Star: n.cfg.StarID, Incarnation: n.regn.Incarnation})
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: n.cfg.PeerTLS}}
	defer client.CloseIdleConnections()
	nudged := 0
	for _, id := range ids {
		if id == n.cfg.StarID {
			continue
		}
		reg, _, ok, err := leader.ReadRegistration(ctx, n.meta, id)
		if err != nil || !ok || reg.Address == "" || !leader.Live(reg, reg.Incarnation, time.Now(), n.cfg.DeadAfter) {
			continue
		}
		if err := nudge(ctx, client, reg.Address, body, n.peerHdr); err != nil {
			n.log.Warn("close: nudge peer to settle", "peer", id, "err", err)
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

// settleOwn is decommission's last step: a drained star leads nothing and
// will never append again, so it absorbs each loglet to the head, stops
// it, and settles its own chains while it stands (fence, walk, probe, mark
// settled), so the terminate gate opens on a star with no unsettled epoch.
func (n *Node) settleOwn(ctx context.Context) error {
	me := chain.Incarnation(n.cfg.StarID, n.regn.Incarnation)
	for _, class := range []meta.Class{meta.Standard, meta.Express} {
		l := n.loglets[class]
		if l == nil {
			continue
		}
		if err := l.AwaitAbsorbed(ctx); err != nil {
			return err
		}
		l.Close()
		ch := chain.New(n.cfg.StarID, class, me, n.meta, n.objects)
		abs := &absorb.Absorber{Star: n.cfg.StarID, Class: class, Meta: n.meta, Rip: n.cfg.ripening(class), UpdateEpoch: ch.UpdateEpoch}
		if err := settle.ChainThrough(ctx, ch, abs, l.Epoch()); err != nil {
			return fmt.Errorf("decommission: settle own %s chain: %w", class, err)
		}
	}
	return nil
}
