package api

import (
	"encoding/json"
	"time"
)

// rfc3339 renders a resource time: RFC 3339 in UTC with the fraction the
// time has (S2 SDKs parse it with Date).
func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func rfc3339Ptr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := rfc3339(*t)
	return &s
}

func parseRFC3339Ptr(s *string) (*time.Time, error) {
	if s == nil {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// BasinState is the deprecated state field older SDKs read.
type BasinState string

const (
	BasinActive   BasinState = "active"
	BasinDeleting BasinState = "deleting"
)

// BasinInfo describes a basin.
type BasinInfo struct {
	Name      string
	CreatedAt time.Time
	// DeletedAt is set while the basin is being deleted.
	DeletedAt *time.Time
	// Location is where the basin lives: the deployment's one location
	// (empty: not said).
	Location string
}

type basinInfoJSON struct {
	Name      string     `json:"name"`
	CreatedAt string     `json:"created_at"`
	DeletedAt *string    `json:"deleted_at"`
	Location  string     `json:"location,omitempty"`
	State     BasinState `json:"state"`
}

// MarshalJSON renders {"name","created_at","deleted_at","state"}; state
// ("active" or "deleting", derived from deleted_at) is for SDKs that still
// read it.
func (b BasinInfo) MarshalJSON() ([]byte, error) {
	state := BasinActive
	if b.DeletedAt != nil {
		state = BasinDeleting
	}
	return json.Marshal(basinInfoJSON{Name: b.Name, CreatedAt: rfc3339(b.CreatedAt), DeletedAt: rfc3339Ptr(b.DeletedAt), Location: b.Location, State: state})
}

func (b *BasinInfo) UnmarshalJSON(data []byte) error {
	var w basinInfoJSON
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	created, err := time.Parse(time.RFC3339Nano, w.CreatedAt)
	if err != nil {
		return err
	}
	deleted, err := parseRFC3339Ptr(w.DeletedAt)
	if err != nil {
		return err
	}
	*b = BasinInfo{Name: w.Name, CreatedAt: created, DeletedAt: deleted, Location: w.Location}
	return nil
}

// StreamInfo describes a stream.
type StreamInfo struct {
	Name      string
	CreatedAt time.Time
	// DeletedAt is set while the stream is being deleted.
	DeletedAt *time.Time
	// Cipher is the stream's cipher ("" for none), fixed at its creation.
	Cipher string
}

type streamInfoJSON struct {
	Name      string  `json:"name"`
	CreatedAt string  `json:"created_at"`
	DeletedAt *string `json:"deleted_at"`
	Cipher    string  `json:"cipher,omitempty"`
}

// MarshalJSON renders {"name","created_at","deleted_at","cipher"}
// (deleted_at null unless deleting; cipher only for an encrypted stream).
func (s StreamInfo) MarshalJSON() ([]byte, error) {
	return json.Marshal(streamInfoJSON{Name: s.Name, CreatedAt: rfc3339(s.CreatedAt), DeletedAt: rfc3339Ptr(s.DeletedAt), Cipher: s.Cipher})
}

func (s *StreamInfo) UnmarshalJSON(data []byte) error {
	var w streamInfoJSON
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	created, err := time.Parse(time.RFC3339Nano, w.CreatedAt)
	if err != nil {
		return err
	}
	deleted, err := parseRFC3339Ptr(w.DeletedAt)
	if err != nil {
		return err
	}
	*s = StreamInfo{Name: w.Name, CreatedAt: created, DeletedAt: deleted, Cipher: w.Cipher}
	return nil
}

// ListBasinsResponse is the body of GET /basins.
type ListBasinsResponse struct {
	Basins  []BasinInfo `json:"basins"`
	HasMore bool        `json:"has_more"`
}

// MarshalJSON keeps an empty list as [] rather than null.
func (r ListBasinsResponse) MarshalJSON() ([]byte, error) {
	type plain ListBasinsResponse
	if r.Basins == nil {
		r.Basins = []BasinInfo{}
	}
	return json.Marshal(plain(r))
}

// ListStreamsResponse is the body of GET /streams.
type ListStreamsResponse struct {
	Streams []StreamInfo `json:"streams"`
	HasMore bool         `json:"has_more"`
}

// MarshalJSON keeps an empty list as [] rather than null.
func (r ListStreamsResponse) MarshalJSON() ([]byte, error) {
	type plain ListStreamsResponse
	if r.Streams == nil {
		r.Streams = []StreamInfo{}
	}
	return json.Marshal(plain(r))
}

// CreateBasinRequest is the body of POST /basins.
type CreateBasinRequest struct {
	Basin  string       `json:"basin"`
	Config *BasinConfig `json:"config,omitempty"`
	// Location, if given, must be the deployment's one location.
	Location *string `json:"location,omitempty"`
}

// EnsureBasinRequest is the body of PUT /basins/{b}.
type EnsureBasinRequest struct {
	Config   *BasinConfig `json:"config,omitempty"`
	Location *string      `json:"location,omitempty"`
}

// CreateStreamRequest is the body of POST /streams.
type CreateStreamRequest struct {
	Stream string        `json:"stream"`
	Config *StreamConfig `json:"config,omitempty"`
}

// DecodeCreateBasinRequest decodes and validates POST /basins.
func DecodeCreateBasinRequest(body []byte) (CreateBasinRequest, *Error) {
	var r CreateBasinRequest
	if err := UnmarshalText(body, &r); err != nil {
		return CreateBasinRequest{}, BadJSON("create basin: %s", jsonMessage(err))
	}
	if err := ValidateBasinName(r.Basin); err != nil {
		return CreateBasinRequest{}, InJSON(err)
	}
	if r.Config != nil {
		if err := r.Config.Validate(); err != nil {
			return CreateBasinRequest{}, err
		}
	}
	return r, nil
}

// DecodeEnsureBasinRequest decodes and validates PUT /basins/{b}; an empty
// body is an empty request.
func DecodeEnsureBasinRequest(body []byte) (EnsureBasinRequest, *Error) {
	var r EnsureBasinRequest
	if isEmptyJSON(body) {
		return r, nil
	}
	if err := UnmarshalText(body, &r); err != nil {
		return EnsureBasinRequest{}, BadJSON("ensure basin: %s", jsonMessage(err))
	}
	if r.Config != nil {
		if err := r.Config.Validate(); err != nil {
			return EnsureBasinRequest{}, err
		}
	}
	return r, nil
}

// DecodeCreateStreamRequest decodes and validates POST /streams.
func DecodeCreateStreamRequest(body []byte) (CreateStreamRequest, *Error) {
	var r CreateStreamRequest
	if err := UnmarshalText(body, &r); err != nil {
		return CreateStreamRequest{}, BadJSON("create stream: %s", jsonMessage(err))
	}
	if err := ValidateStreamName(r.Stream); err != nil {
		return CreateStreamRequest{}, InJSON(err)
	}
	if r.Config != nil {
		if err := r.Config.Validate(); err != nil {
			return CreateStreamRequest{}, err
		}
	}
	return r, nil
}

// LocationInfo is one entry of GET /locations and the body of GET
// /locations/default.
type LocationInfo struct {
	Name      string `json:"name"`
	IsPrivate bool   `json:"is_private"`
}
