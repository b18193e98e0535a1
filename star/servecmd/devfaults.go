// The dev fault control of `star serve` (hidden flag --dev-fault-listen).
// It is for tests and local experiments only: never enable it on a
// production star. It lets another process make this star's metastore and
// buckets slow or down while the star runs (the linearizability checker's
// nemesis and the failover benchmark use it).
//
// The control serves plain HTTP on its own address:
//
//	GET    /faults  the current state
//	PUT    /faults  apply a change (omitted fields stay as they are)
//	DELETE /faults  clear every fault
//
// The state, and the body of a PUT, is
//
//	{"meta":{"latency_ms":N,"down":bool},
//	 "buckets":{"<name>":{"latency_ms":N,"down":bool,"hang":bool},...}}
//
// listing every bucket of the star's Standard and Express sets. Metastore
// latency is added to every metastore call and "down" fails every call;
// bucket latency is added to every request on the bucket and "down" fails
// every request at once (an indefinite failure, as an unreachable bucket),
// or, with "hang", blocks it until its context ends (a black hole).
package servecmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/api"
	metafaults "github.com/starlog/starlog/shared/meta/faults"
	objfaults "github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/devfaults"
	"github.com/starlog/starlog/star/node"
)

// maxFaultLatency bounds an injected latency (a typo should not hang a
// star for days).
const maxFaultLatency = time.Hour

// devFaults wraps the star's stores and applies the control's changes.
type devFaults struct {
	log     *slog.Logger
	meta    *metafaults.Store
	objs    *objfaults.Store
	buckets []string

	mu    sync.Mutex
	state devfaults.Doc
}

// withDevFaults opens the stores o.cfg selects, wraps them with the fault
// injectors, passes them to the star in o.deps and serves the control on
// addr. The returned function stops the control and closes the metastore
// (the star does not close stores it is given): call it after run.
func withDevFaults(ctx context.Context, o *runOptions, addr string) (func(), error) {
	ms, objs, err := node.OpenStores(ctx, o.cfg)
	if err != nil {
		return nil, err
	}
	d := &devFaults{
		log:     o.log,
		meta:    metafaults.New(ms, 1),
		objs:    objfaults.Wrap(objs),
		buckets: node.Buckets(o.cfg),
	}
	d.state = d.cleared()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		ms.Close()
		return nil, fmt.Errorf("--dev-fault-listen %s: %w", addr, err)
	}
	keys, err := auth.Derive(o.srv.Auth)
	if err != nil {
		ms.Close()
		ln.Close()
		return nil, err
	}
	hs := &http.Server{Handler: requireInternal(keys, d.handler()), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	o.log.Warn("dev fault control: listening (tests and local experiments only)", "addr", ln.Addr().String(), "buckets", d.buckets)
	o.deps.Meta, o.deps.Objects = d.meta, d.objs
	return func() {
		hs.Close()
		ms.Close()
	}, nil
}

// requireInternal refuses (401) a request without the cluster's internal
// credential: the fault control can stop the star's stores.
func requireInternal(keys auth.Keys, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !keys.IsInternal(r.Header.Get(auth.HeaderInternal)) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			w.Write(auth.Unauthenticated("the dev fault control needs the cluster's internal credential (%s)", auth.HeaderInternal).JSON())
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (d *devFaults) cleared() devfaults.Doc {
	doc := devfaults.Doc{Buckets: make(map[string]devfaults.Setting, len(d.buckets))}
	for _, b := range d.buckets {
		doc.Buckets[b] = devfaults.Setting{}
	}
	return doc
}

// handler serves /faults. Every error is the API's JSON error body, as on
// the star's own port.
func (d *devFaults) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/faults" {
			writeFaultErr(w, api.BadPath("dev fault control: no such endpoint (want /faults)"))
			return
		}
		switch r.Method {
		case http.MethodGet:
			writeFaults(w, d.snapshot())
		case http.MethodPut:
			var p devfaults.DocPatch
			dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&p); err != nil {
				writeFaultErr(w, api.BadJSON("dev fault control: body: %v", err))
				return
			}
			doc, err := d.apply(p)
			if err != nil {
				writeFaultErr(w, api.BadJSON("dev fault control: %v", err))
				return
			}
			writeFaults(w, doc)
		case http.MethodDelete:
			writeFaults(w, d.clear())
		default:
			w.Header().Set("Allow", "GET, PUT, DELETE")
			writeFaultErr(w, &api.Error{Status: http.StatusMethodNotAllowed, Code: api.CodeBadPath,
				Message: "dev fault control: /faults takes GET, PUT or DELETE"})
		}
	})
}

func writeFaultErr(w http.ResponseWriter, e *api.Error) {
	w.Header().Set("Content-Type", api.ContentTypeJSON)
	w.WriteHeader(e.Status)
	w.Write(e.JSON())
}

func writeFaults(w http.ResponseWriter, doc devfaults.Doc) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(doc)
}

func (d *devFaults) snapshot() devfaults.Doc {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.copyState()
}

// copyState is a copy of the state; d.mu is held.
func (d *devFaults) copyState() devfaults.Doc {
	doc := devfaults.Doc{Meta: d.state.Meta, Buckets: make(map[string]devfaults.Setting, len(d.state.Buckets))}
	for b, s := range d.state.Buckets {
		doc.Buckets[b] = s
	}
	return doc
}

func checkPatch(what string, p *devfaults.Patch) error {
	if p != nil && p.Hang != nil && what == "meta" {
		return fmt.Errorf("meta: hang is for buckets only")
	}
	if p == nil || p.LatencyMS == nil {
		return nil
	}
	// Compared in milliseconds: a Duration of a huge ms wraps under the bound.
	if ms := *p.LatencyMS; ms < 0 || ms > maxFaultLatency.Milliseconds() {
		return fmt.Errorf("%s: latency_ms %d: want 0 to %d", what, ms, maxFaultLatency.Milliseconds())
	}
	return nil
}

func patched(s devfaults.Setting, p *devfaults.Patch) devfaults.Setting {
	if p == nil {
		return s
	}
	if p.LatencyMS != nil {
		s.LatencyMS = *p.LatencyMS
	}
	if p.Down != nil {
		s.Down = *p.Down
	}
	if p.Hang != nil {
		s.Hang = *p.Hang
	}
	return s
}

// apply validates the whole change, then applies it: a rejected change
// applies nothing.
func (d *devFaults) apply(p devfaults.DocPatch) (devfaults.Doc, error) {
	if err := checkPatch("meta", p.Meta); err != nil {
		return devfaults.Doc{}, err
	}
	for b, bp := range p.Buckets {
		if !slices.Contains(d.buckets, b) {
			return devfaults.Doc{}, fmt.Errorf("bucket %q: this star uses %v", b, d.buckets)
		}
		if err := checkPatch("bucket "+b, bp); err != nil {
			return devfaults.Doc{}, err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if p.Meta != nil {
		d.setMeta(patched(d.state.Meta, p.Meta))
	}
	for b, bp := range p.Buckets {
		d.setBucket(b, patched(d.state.Buckets[b], bp))
	}
	return d.copyState(), nil
}

func (d *devFaults) clear() devfaults.Doc {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.setMeta(devfaults.Setting{})
	for _, b := range d.buckets {
		d.setBucket(b, devfaults.Setting{})
	}
	return d.copyState()
}

// setMeta applies the metastore's state; d.mu is held.
func (d *devFaults) setMeta(s devfaults.Setting) {
	if s == d.state.Meta {
		return
	}
	d.meta.SetLatency(metafaults.Constant(time.Duration(s.LatencyMS) * time.Millisecond))
	d.meta.SetUnavailable(s.Down)
	d.log.Warn("dev fault control: metastore", "latency_ms", s.LatencyMS, "down", s.Down,
		"was_latency_ms", d.state.Meta.LatencyMS, "was_down", d.state.Meta.Down)
	d.state.Meta = s
}

// setBucket applies one bucket's state; d.mu is held.
func (d *devFaults) setBucket(b string, s devfaults.Setting) {
	was := d.state.Buckets[b]
	if s == was {
		return
	}
	d.objs.SetSlow(b, time.Duration(s.LatencyMS)*time.Millisecond)
	if s.Down {
		// Without hang every request fails at once; with it, it blocks
		// until its context ends.
		d.objs.SetDown(b, objfaults.Down{Hang: s.Hang})
	} else {
		d.objs.SetUp(b)
	}
	d.log.Warn("dev fault control: bucket", "bucket", b, "latency_ms", s.LatencyMS, "down", s.Down, "hang", s.Hang,
		"was_latency_ms", was.LatencyMS, "was_down", was.Down, "was_hang", was.Hang)
	d.state.Buckets[b] = s
}
