// Package sdktest is an in-memory S2-compatible server for tests of the SDK
// and of its users: basins, streams, unary appends and reads (JSON and
// protobuf), check-tail, and S2S append and read sessions over h2c, with
// hooks that inject failures. It keeps everything in memory and follows
// the semantics of docs/design.md §16 (s2-lite's), not a star's storage.
// It is not a production server.
package sdktest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/api"
)

// Fault is what a hook injects into one append batch.
type Fault struct {
	// Err, if set, fails the batch with this error (a terminal frame in a
	// session).
	Err *api.Error
	// Apply applies the batch before failing it: the write happened but
	// the client is told otherwise (an indefinite outcome).
	Apply bool
}

// AppendCall describes one append batch reaching the server.
type AppendCall struct {
	Basin, Stream string
	// Session is true for a batch of an S2S append session.
	Session bool
	Input   *api.AppendInput
}

// ReadFault is what a hook injects into one S2S read session.
type ReadFault struct {
	// DropAfter, if positive, breaks the connection after this many
	// non-empty batches.
	DropAfter int
	// DropAfterHeartbeat breaks the connection right after the first
	// heartbeat.
	DropAfterHeartbeat bool
	// NoHeartbeats silences heartbeats.
	NoHeartbeats bool
	// Terminal, if set, is sent as a terminal frame before anything else.
	Terminal *api.Error
	// ReconnectAfter, if positive, sets the reconnect-advised bit on the
	// batch with this number (from 1) and on later ones.
	ReconnectAfter int
}

// Options configures a Server. The zero value is usable.
type Options struct {
	// HeartbeatInterval of read sessions; default 5 s.
	HeartbeatInterval time.Duration
	// AppendHook, if set, runs before each append batch is applied. It may
	// block (to hold acks back); ctx ends with the request.
	AppendHook func(ctx context.Context, c AppendCall) Fault
	// ReadSessionHook, if set, runs when a read session starts.
	ReadSessionHook func(q url.Values) ReadFault
	// Now is the clock of arrival timestamps; default time.Now.
	Now func() time.Time
}

// Server is a running test server.
type Server struct {
	// URL is the base URL, without /v1.
	URL string

	srv  *httptest.Server
	opts Options
	st   *store

	mu           sync.Mutex
	appendCalls  int
	readSessions []url.Values
	following    int // reads past their start: sessions, and long polls waiting
	heartbeats   int
	appendSess   int
}

// New starts a server on 127.0.0.1 speaking HTTP/1.1 and h2c. Close it
// when done.
func New(opts Options) *Server {
	s := NewUnstarted(opts)
	s.Start()
	return s
}

// NewUnstarted returns a server that Start starts.
func NewUnstarted(opts Options) *Server {
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Server{opts: opts, st: newStore(opts.Now)}
	s.srv = httptest.NewUnstartedServer(s)
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	s.srv.Config.Protocols = p
	return s
}

// Start starts the server.
func (s *Server) Start() {
	s.srv.Start()
	s.URL = s.srv.URL
}

// Close stops the server, breaking open sessions.
func (s *Server) Close() {
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// AppendCalls is the number of append batches that reached the server
// (unary attempts and session frames).
func (s *Server) AppendCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.appendCalls
}

// AppendSessions is the number of append sessions opened.
func (s *Server) AppendSessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.appendSess
}

// ReadSessions returns the query of every read session opened, in order.
func (s *Server) ReadSessions() []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]url.Values(nil), s.readSessions...)
}

// ReadsFollowing is the number of reads whose start position is fixed, so
// that a record appended from then on is one they deliver: read sessions
// once open, long polls once waiting. A test that reads new records waits
// on it before appending them.
func (s *Server) ReadsFollowing() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.following
}

// Heartbeats is the number of heartbeats sent on read sessions while they
// were idle.
func (s *Server) Heartbeats() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heartbeats
}

func (s *Server) count(n *int) {
	s.mu.Lock()
	*n++
	s.mu.Unlock()
}

// Records returns a copy of a stream's records (nil if it does not exist).
func (s *Server) Records(basinName, streamName string) []api.Record {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	b := s.st.basins[basinName]
	if b == nil || b.streams[streamName] == nil {
		return nil
	}
	return append([]api.Record(nil), b.streams[streamName].records...)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, api.Other("encode response: %v", err))
		return
	}
	w.Header().Set("Content-Type", api.ContentTypeJSON)
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, e *api.Error) {
	w.Header().Set("Content-Type", api.ContentTypeJSON)
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.JSON())
}

func writeEmpty(w http.ResponseWriter, status int) {
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(status)
}

func readBody(r *http.Request, limit int64) ([]byte, *api.Error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, api.BadJSON("read body: %v", err)
	}
	if int64(len(b)) > limit {
		return nil, api.Invalid("body exceeds %d bytes", limit)
	}
	return b, nil
}

// ServeHTTP routes /v1 on the escaped path (stream names are one
// percent-encoded segment).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path, ok := strings.CutPrefix(r.URL.EscapedPath(), "/v1/")
	if !ok {
		writeError(w, api.BadPath("unknown path %s", r.URL.EscapedPath()))
		return
	}
	segs := strings.Split(path, "/")
	for i, seg := range segs {
		u, err := url.PathUnescape(seg)
		if err != nil {
			writeError(w, api.BadPath("bad path segment: %v", err))
			return
		}
		segs[i] = u
	}
	switch {
	case segs[0] == "basins" && len(segs) == 1:
		s.basinsRoot(w, r)
	case segs[0] == "basins" && len(segs) == 2:
		s.basinItem(w, r, segs[1])
	case segs[0] == "streams":
		bname := r.Header.Get(api.HeaderBasin)
		if bname == "" {
			writeError(w, api.BadHeader("missing s2-basin header"))
			return
		}
		switch {
		case len(segs) == 1:
			s.streamsRoot(w, r, bname)
		case len(segs) == 2:
			s.streamItem(w, r, bname, segs[1])
		case len(segs) == 3 && segs[2] == "records":
			s.records(w, r, bname, segs[1])
		case len(segs) == 4 && segs[2] == "records" && segs[3] == "tail" && r.Method == http.MethodGet:
			s.checkTail(w, bname, segs[1])
		default:
			writeError(w, api.BadPath("unknown path %s", r.URL.EscapedPath()))
		}
	default:
		writeError(w, api.BadPath("unknown path %s", r.URL.EscapedPath()))
	}
}

func (s *Server) basinsRoot(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		q, aerr := api.ParseListQuery(r.URL.Query())
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		s.st.mu.Lock()
		ns, more := names(s.st.basins, q)
		resp := api.ListBasinsResponse{HasMore: more}
		for _, n := range ns {
			resp.Basins = append(resp.Basins, s.st.basins[n].info)
		}
		s.st.mu.Unlock()
		writeJSON(w, http.StatusOK, resp)
	case http.MethodPost:
		body, aerr := readBody(r, api.MaxResourceJSONBytes)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		req, aerr := api.DecodeCreateBasinRequest(body)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		s.st.mu.Lock()
		defer s.st.mu.Unlock()
		if _, ok := s.st.basins[req.Basin]; ok {
			writeError(w, api.ResourceAlreadyExists("basin %s already exists", req.Basin))
			return
		}
		b := &basin{info: api.BasinInfo{Name: req.Basin, CreatedAt: s.st.now().UTC()}, streams: map[string]*stream{}}
		if req.Config != nil {
			b.cfg = *req.Config
		}
		s.st.basins[req.Basin] = b
		writeJSON(w, http.StatusCreated, b.info)
	default:
		writeError(w, api.BadPath("method %s not allowed", r.Method))
	}
}

func (s *Server) basinItem(w http.ResponseWriter, r *http.Request, name string) {
	if aerr := api.ValidateBasinName(name); aerr != nil {
		writeError(w, aerr)
		return
	}
	var body []byte
	if r.Method == http.MethodPut || r.Method == http.MethodPatch {
		var aerr *api.Error
		if body, aerr = readBody(r, api.MaxResourceJSONBytes); aerr != nil {
			writeError(w, aerr)
			return
		}
	}
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	b := s.st.basins[name]
	switch r.Method {
	case http.MethodGet:
		if b == nil {
			writeError(w, api.BasinNotFound("basin %s not found", name))
			return
		}
		writeJSON(w, http.StatusOK, b.cfg)
	case http.MethodPut:
		req, aerr := api.DecodeEnsureBasinRequest(body)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		var cfg api.BasinConfig
		if req.Config != nil {
			cfg = *req.Config
		}
		status, result := http.StatusOK, api.ProvisionUpdated
		if b == nil {
			b = &basin{info: api.BasinInfo{Name: name, CreatedAt: s.st.now().UTC()}, streams: map[string]*stream{}}
			s.st.basins[name] = b
			status, result = http.StatusCreated, api.ProvisionCreated
		}
		b.cfg = cfg
		w.Header().Set(api.HeaderProvisionResult, result)
		writeJSON(w, status, b.info)
	case http.MethodPatch:
		if b == nil {
			writeError(w, api.BasinNotFound("basin %s not found", name))
			return
		}
		rc, aerr := api.DecodeBasinReconfiguration(body)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		b.cfg = b.cfg.Reconfigure(rc)
		writeJSON(w, http.StatusOK, b.cfg)
	case http.MethodDelete:
		if b == nil {
			writeError(w, api.BasinNotFound("basin %s not found", name))
			return
		}
		delete(s.st.basins, name)
		writeEmpty(w, http.StatusAccepted)
	default:
		writeError(w, api.BadPath("method %s not allowed", r.Method))
	}
}

// basinLocked finds a basin for a stream call.
func (s *Server) basinLocked(name string) (*basin, *api.Error) {
	b := s.st.basins[name]
	if b == nil {
		return nil, api.BasinNotFound("basin %s not found", name)
	}
	return b, nil
}

func (s *Server) newStreamLocked(name string, cfg api.StreamConfig) *stream {
	return &stream{info: api.StreamInfo{Name: name, CreatedAt: s.st.now().UTC()}, cfg: cfg, notify: make(chan struct{})}
}

// streamLocked finds a stream, creating it when the basin says so.
func (s *Server) streamLocked(bname, name string, create bool) (*basin, *stream, *api.Error) {
	b, aerr := s.basinLocked(bname)
	if aerr != nil {
		return nil, nil, aerr
	}
	st := b.streams[name]
	if st == nil {
		if !create {
			return nil, nil, api.StreamNotFound("stream %s not found", name)
		}
		st = s.newStreamLocked(name, api.StreamConfig{})
		b.streams[name] = st
	}
	return b, st, nil
}

func (s *Server) streamsRoot(w http.ResponseWriter, r *http.Request, bname string) {
	switch r.Method {
	case http.MethodGet:
		q, aerr := api.ParseListQuery(r.URL.Query())
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		s.st.mu.Lock()
		defer s.st.mu.Unlock()
		b, aerr := s.basinLocked(bname)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		ns, more := names(b.streams, q)
		resp := api.ListStreamsResponse{HasMore: more}
		for _, n := range ns {
			resp.Streams = append(resp.Streams, b.streams[n].info)
		}
		writeJSON(w, http.StatusOK, resp)
	case http.MethodPost:
		body, aerr := readBody(r, api.MaxResourceJSONBytes)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		req, aerr := api.DecodeCreateStreamRequest(body)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		s.st.mu.Lock()
		defer s.st.mu.Unlock()
		b, aerr := s.basinLocked(bname)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		if _, ok := b.streams[req.Stream]; ok {
			writeError(w, api.ResourceAlreadyExists("stream %s already exists", req.Stream))
			return
		}
		var cfg api.StreamConfig
		if req.Config != nil {
			cfg = *req.Config
		}
		st := s.newStreamLocked(req.Stream, cfg)
		b.streams[req.Stream] = st
		writeJSON(w, http.StatusCreated, st.info)
	default:
		writeError(w, api.BadPath("method %s not allowed", r.Method))
	}
}

func (s *Server) streamItem(w http.ResponseWriter, r *http.Request, bname, name string) {
	if aerr := api.ValidateStreamName(name); aerr != nil {
		writeError(w, aerr)
		return
	}
	var body []byte
	if r.Method == http.MethodPut || r.Method == http.MethodPatch {
		var aerr *api.Error
		if body, aerr = readBody(r, api.MaxResourceJSONBytes); aerr != nil {
			writeError(w, aerr)
			return
		}
	}
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	b, aerr := s.basinLocked(bname)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	st := b.streams[name]
	if st == nil && r.Method != http.MethodPut {
		writeError(w, api.StreamNotFound("stream %s not found", name))
		return
	}
	switch r.Method {
	case http.MethodGet:
		writeJSON(w, http.StatusOK, st.cfg.Resolve(b.cfg.DefaultStreamConfig).StreamConfig())
	case http.MethodPut:
		cfg, aerr := api.DecodeStreamConfig(body)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		status, result := http.StatusOK, api.ProvisionUpdated
		if st == nil {
			st = s.newStreamLocked(name, cfg)
			b.streams[name] = st
			status, result = http.StatusCreated, api.ProvisionCreated
		}
		st.cfg = cfg
		w.Header().Set(api.HeaderProvisionResult, result)
		writeJSON(w, status, st.info)
	case http.MethodPatch:
		rc, aerr := api.DecodeStreamReconfiguration(body)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		st.cfg = st.cfg.Reconfigure(rc)
		writeJSON(w, http.StatusOK, st.cfg.Resolve(b.cfg.DefaultStreamConfig).StreamConfig())
	case http.MethodDelete:
		delete(b.streams, name)
		close(st.notify) // wake readers: they find the stream gone
		writeEmpty(w, http.StatusAccepted)
	default:
		writeError(w, api.BadPath("method %s not allowed", r.Method))
	}
}

func (s *Server) checkTail(w http.ResponseWriter, bname, name string) {
	s.st.mu.Lock()
	_, st, aerr := s.streamLocked(bname, name, false)
	var tail api.StreamPosition
	if aerr == nil {
		tail = st.tail()
	}
	s.st.mu.Unlock()
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	w.Header().Set("Content-Type", api.ContentTypeJSON)
	_, _ = w.Write(api.EncodeTailJSON(tail))
}

func (s *Server) records(w http.ResponseWriter, r *http.Request, bname, name string) {
	session := api.ParseMediaType(r.Header.Get("Content-Type")) == api.MediaS2S
	if session && r.ProtoMajor < 2 {
		// Strict on purpose: S2S is specified over HTTP/2, and tests must
		// catch a client that falls back to HTTP/1.1.
		writeError(w, api.BadHeader("s2s sessions need HTTP/2, got %s", r.Proto))
		return
	}
	switch {
	case r.Method == http.MethodPost && session:
		s.appendSession(w, r, bname, name)
	case r.Method == http.MethodPost:
		s.appendUnary(w, r, bname, name)
	case r.Method == http.MethodGet && session:
		s.readSession(w, r, bname, name)
	case r.Method == http.MethodGet:
		s.readUnary(w, r, bname, name)
	default:
		writeError(w, api.BadPath("method %s not allowed", r.Method))
	}
}

// apply runs the hook and applies one batch.
func (s *Server) apply(ctx context.Context, bname, name string, session bool, in *api.AppendInput) (api.AppendAck, *api.Error) {
	s.mu.Lock()
	s.appendCalls++
	s.mu.Unlock()
	var fault Fault
	if s.opts.AppendHook != nil {
		fault = s.opts.AppendHook(ctx, AppendCall{Basin: bname, Stream: name, Session: session, Input: in})
	}
	if fault.Err != nil && !fault.Apply {
		return api.AppendAck{}, fault.Err
	}
	s.st.mu.Lock()
	b, st, aerr := s.streamLocked(bname, name, s.autoCreateLocked(bname, true))
	var ack api.AppendAck
	if aerr == nil {
		ack, aerr = s.st.appendLocked(b, st, in)
	}
	s.st.mu.Unlock()
	if aerr != nil {
		return api.AppendAck{}, aerr
	}
	if fault.Err != nil {
		return api.AppendAck{}, fault.Err
	}
	return ack, nil
}

func (s *Server) autoCreateLocked(bname string, onAppend bool) bool {
	b := s.st.basins[bname]
	if b == nil {
		return false
	}
	if onAppend {
		return b.cfg.CreateStreamOnAppend
	}
	return b.cfg.CreateStreamOnRead
}

func (s *Server) appendUnary(w http.ResponseWriter, r *http.Request, bname, name string) {
	var in *api.AppendInput
	var aerr *api.Error
	if api.ParseMediaType(r.Header.Get("Content-Type")) == api.MediaProto {
		body, e := readBody(r, api.MaxAppendProtoBodyBytes)
		if e != nil {
			writeError(w, e)
			return
		}
		in, aerr = api.DecodeAppendProto(body)
	} else {
		f, e := api.ParseFormat(r.Header.Get(api.HeaderFormat))
		if e != nil {
			writeError(w, e)
			return
		}
		body, e := readBody(r, api.MaxAppendJSONBodyBytes)
		if e != nil {
			writeError(w, e)
			return
		}
		in, aerr = api.DecodeAppendJSON(body, f)
	}
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	ack, aerr := s.apply(r.Context(), bname, name, false, in)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if api.ParseMediaType(r.Header.Get("Accept")) == api.MediaProto {
		w.Header().Set("Content-Type", api.ContentTypeProto)
		_, _ = w.Write(api.EncodeAppendAckProto(ack))
		return
	}
	w.Header().Set("Content-Type", api.ContentTypeJSON)
	_, _ = w.Write(api.EncodeAppendAckJSON(ack))
}

func (s *Server) appendSession(w http.ResponseWriter, r *http.Request, bname, name string) {
	s.mu.Lock()
	s.appendSess++
	s.mu.Unlock()
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex() // HTTP/1.1 only; HTTP/2 is full duplex
	w.Header().Set("Content-Type", api.ContentTypeS2S)
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	fw := api.NewFrameWriter(w, api.NegotiateCompression(r.Header.Values("Accept-Encoding")...))
	defer fw.Close()
	fr := api.NewFrameReader(r.Body)
	defer fr.Close()
	terminal := func(e *api.Error) {
		_ = fw.WriteTerminal(e)
		_ = rc.Flush()
	}
	for {
		f, err := fr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			var ae *api.Error
			if errors.As(err, &ae) {
				terminal(ae)
			}
			return
		}
		if f.Terminal {
			terminal(api.BadFrame("a client may not send a terminal frame"))
			return
		}
		in, aerr := api.DecodeAppendProto(f.Payload)
		if aerr != nil {
			terminal(aerr)
			return
		}
		ack, aerr := s.apply(r.Context(), bname, name, true, in)
		if aerr != nil {
			terminal(aerr)
			return
		}
		if err := fw.WriteMessage(api.EncodeAppendAckProto(ack)); err != nil {
			return
		}
		_ = rc.Flush()
	}
}

func (s *Server) readUnary(w http.ResponseWriter, r *http.Request, bname, name string) {
	req, aerr := api.ParseReadQuery(r.URL.Query(), api.ReadUnary)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	f, aerr := api.ParseFormat(r.Header.Get(api.HeaderFormat))
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	wait, _ := req.EffectiveWait()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	var recs []api.Record
	waiting := false
	for {
		s.st.mu.Lock()
		_, st, aerr := s.streamLocked(bname, name, s.autoCreateLocked(bname, false))
		if aerr != nil {
			s.st.mu.Unlock()
			writeError(w, aerr)
			return
		}
		start, aerr := startLocked(st, &req)
		if aerr != nil {
			s.st.mu.Unlock()
			writeError(w, aerr)
			return
		}
		l := limits{count: req.Count, bytes: req.Bytes, until: req.Until}
		recs, _ = collectLocked(st, start, &l)
		notify := st.notify
		s.st.mu.Unlock()
		if len(recs) > 0 || wait == 0 || (req.Count != nil && *req.Count == 0) {
			break
		}
		// Long poll: re-resolve a seq num start after new records.
		if !waiting {
			waiting = true
			s.count(&s.following)
		}
		req.From, req.Value = api.FromSeqNum, start
		select {
		case <-notify:
			continue
		case <-deadline.C:
		case <-r.Context().Done():
			return
		}
		break
	}
	b := &api.ReadBatch{Records: recs}
	if api.ParseMediaType(r.Header.Get("Accept")) == api.MediaProto {
		w.Header().Set("Content-Type", api.ContentTypeProto)
		_, _ = w.Write(api.EncodeReadBatchProto(b))
		return
	}
	w.Header().Set("Content-Type", api.ContentTypeJSON)
	_, _ = w.Write(api.EncodeReadBatchJSON(b, f))
}

func (s *Server) readSession(w http.ResponseWriter, r *http.Request, bname, name string) {
	s.mu.Lock()
	s.readSessions = append(s.readSessions, r.URL.Query())
	s.mu.Unlock()
	var fault ReadFault
	if s.opts.ReadSessionHook != nil {
		fault = s.opts.ReadSessionHook(r.URL.Query())
	}
	req, aerr := api.ParseReadQuery(r.URL.Query(), api.ReadSession)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	s.st.mu.Lock()
	_, st, aerr := s.streamLocked(bname, name, s.autoCreateLocked(bname, false))
	var pos uint64
	if aerr == nil {
		pos, aerr = startLocked(st, &req)
	}
	s.st.mu.Unlock()
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	s.count(&s.following)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", api.ContentTypeS2S)
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	fw := api.NewFrameWriter(w, api.NegotiateCompression(r.Header.Values("Accept-Encoding")...))
	defer fw.Close()
	if fault.Terminal != nil {
		_ = fw.WriteTerminal(fault.Terminal)
		_ = rc.Flush()
		return
	}
	wait, forever := req.EffectiveWait()
	l := limits{count: req.Count, bytes: req.Bytes, until: req.Until}
	idle := time.NewTimer(wait)
	defer idle.Stop()
	hb := time.NewTicker(s.opts.HeartbeatInterval)
	defer hb.Stop()
	sent := 0
	following := false
	send := func(b *api.ReadBatch) bool {
		if err := fw.WriteMessage(api.EncodeReadBatchProto(b)); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	for {
		s.st.mu.Lock()
		cur, ok := s.currentLocked(bname, name, st)
		if !ok {
			s.st.mu.Unlock()
			_ = fw.WriteTerminal(api.StreamNotFound("stream %s was deleted", name))
			_ = rc.Flush()
			return
		}
		recs, untilHit := collectLocked(cur, pos, &l)
		tail := cur.tail()
		notify := cur.notify
		s.st.mu.Unlock()
		if len(recs) > 0 {
			sent++
			b := &api.ReadBatch{Records: recs}
			if following || pos+uint64(len(recs)) == tail.SeqNum {
				b.Tail = &tail
			}
			if fault.ReconnectAfter > 0 && sent >= fault.ReconnectAfter {
				fw.SetReconnectAdvised(true)
			}
			if !send(b) {
				return
			}
			pos += uint64(len(recs))
			if fault.DropAfter > 0 && sent >= fault.DropAfter {
				panic(http.ErrAbortHandler)
			}
			if !forever {
				idle.Reset(wait)
			}
			continue
		}
		if untilHit || l.done() || (!forever && wait == 0) {
			return
		}
		if !following {
			following = true
			if !fault.NoHeartbeats && !send(&api.ReadBatch{Tail: &tail}) {
				return
			}
			if fault.DropAfterHeartbeat {
				panic(http.ErrAbortHandler)
			}
		}
		var idleC <-chan time.Time
		if !forever {
			idleC = idle.C
		}
		select {
		case <-notify:
		case <-hb.C:
			if fault.NoHeartbeats {
				continue
			}
			if !send(&api.ReadBatch{Tail: &tail}) {
				return
			}
			s.count(&s.heartbeats)
		case <-idleC:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// currentLocked reports whether st is still the stream's live incarnation.
func (s *Server) currentLocked(bname, name string, st *stream) (*stream, bool) {
	b := s.st.basins[bname]
	if b == nil || b.streams[name] != st {
		return nil, false
	}
	return st, true
}
