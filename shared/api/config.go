package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// StorageClass is a stream's storage class.
type StorageClass string

const (
	StorageStandard StorageClass = "standard"
	StorageExpress  StorageClass = "express"
)

func (s *StorageClass) UnmarshalJSON(b []byte) error {
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return errors.New("storage_class must be a string")
	}
	switch StorageClass(v) {
	case StorageStandard, StorageExpress:
		*s = StorageClass(v)
		return nil
	}
	return fmt.Errorf("unknown storage_class %q: want standard or express", truncate(v, 32))
}

// TimestampingMode is how appends get their timestamps.
type TimestampingMode string

const (
	// ClientPrefer uses the client's timestamp if given, else arrival time.
	ClientPrefer TimestampingMode = "client-prefer"
	// ClientRequire rejects records without a client timestamp.
	ClientRequire TimestampingMode = "client-require"
	// Arrival always uses arrival time.
	Arrival TimestampingMode = "arrival"
)

func (m *TimestampingMode) UnmarshalJSON(b []byte) error {
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return errors.New("timestamping mode must be a string")
	}
	switch TimestampingMode(v) {
	case ClientPrefer, ClientRequire, Arrival:
		*m = TimestampingMode(v)
		return nil
	}
	return fmt.Errorf("unknown timestamping mode %q: want client-prefer, client-require or arrival", truncate(v, 32))
}

// RetentionPolicy is {"age":secs} or {"infinite":{}}.
type RetentionPolicy struct {
	// AgeSecs retains records for this many seconds (must be > 0) unless
	// Infinite is set.
	AgeSecs  uint64
	Infinite bool
}

// DefaultRetentionAgeSecs is seven days.
const DefaultRetentionAgeSecs = 7 * 24 * 60 * 60

func (p RetentionPolicy) MarshalJSON() ([]byte, error) {
	if p.Infinite {
		return []byte(`{"infinite":{}}`), nil
	}
	return fmt.Appendf(nil, `{"age":%d}`, p.AgeSecs), nil
}

func (p *RetentionPolicy) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || raw == nil {
		return errors.New(`retention_policy must be {"age":secs} or {"infinite":{}}`)
	}
	if len(raw) != 1 {
		return errors.New(`retention_policy must have exactly one of age or infinite`)
	}
	if v, ok := raw["age"]; ok {
		var age uint64
		if err := json.Unmarshal(v, &age); err != nil || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			return errors.New("retention_policy.age must be an unsigned integer of seconds")
		}
		*p = RetentionPolicy{AgeSecs: age}
		return nil
	}
	if v, ok := raw["infinite"]; ok {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(v, &obj); err != nil || obj == nil {
			return errors.New("retention_policy.infinite must be an object")
		}
		*p = RetentionPolicy{Infinite: true}
		return nil
	}
	return errors.New(`retention_policy must have exactly one of age or infinite`)
}

// TimestampingConfig is a stream's timestamping; nil fields are unset.
type TimestampingConfig struct {
	Mode *TimestampingMode `json:"mode,omitempty"`
	// Uncapped lets client timestamps exceed arrival time.
	Uncapped *bool `json:"uncapped,omitempty"`
}

// DeleteOnEmptyConfig deletes a stream that has been empty, with no writes,
// for MinAgeSecs; 0 disables it. It applies only with age retention.
type DeleteOnEmptyConfig struct {
	MinAgeSecs uint64 `json:"min_age_secs"`
}

// StreamConfig is a stream config as given by a client or stored: nil
// fields are unset and fall back to the basin's default stream config, then
// to the built-in defaults (see Resolve).
type StreamConfig struct {
	StorageClass    *StorageClass        `json:"storage_class,omitempty"`
	RetentionPolicy *RetentionPolicy     `json:"retention_policy,omitempty"`
	Timestamping    *TimestampingConfig  `json:"timestamping,omitempty"`
	DeleteOnEmpty   *DeleteOnEmptyConfig `json:"delete_on_empty,omitempty"`
}

// Validate checks a config: an age retention must be positive. Failures
// are 422 invalid.
func (c *StreamConfig) Validate() *Error {
	if c.RetentionPolicy != nil && !c.RetentionPolicy.Infinite && c.RetentionPolicy.AgeSecs == 0 {
		return Invalid("retention_policy.age must be greater than 0 seconds")
	}
	return nil
}

// Merge fills c's unset fields from base (timestamping field by field). The
// result shares pointed-to values with its inputs: treat configs as values.
func (c StreamConfig) Merge(base StreamConfig) StreamConfig {
	out := c
	if out.StorageClass == nil {
		out.StorageClass = base.StorageClass
	}
	if out.RetentionPolicy == nil {
		out.RetentionPolicy = base.RetentionPolicy
	}
	if out.DeleteOnEmpty == nil {
		out.DeleteOnEmpty = base.DeleteOnEmpty
	}
	switch {
	case out.Timestamping == nil:
		out.Timestamping = base.Timestamping
	case base.Timestamping != nil:
		ts := *out.Timestamping
		if ts.Mode == nil {
			ts.Mode = base.Timestamping.Mode
		}
		if ts.Uncapped == nil {
			ts.Uncapped = base.Timestamping.Uncapped
		}
		out.Timestamping = &ts
	}
	return out
}

// EffectiveStreamConfig is a fully resolved stream config.
type EffectiveStreamConfig struct {
	StorageClass     StorageClass
	Retention        RetentionPolicy
	TimestampingMode TimestampingMode
	// Uncapped lets client timestamps exceed arrival time.
	Uncapped bool
	// DeleteOnEmptyMinAgeSecs is 0 when delete-on-empty is off.
	DeleteOnEmptyMinAgeSecs uint64
}

// DefaultStreamConfig is the built-in default: standard storage (as S2's
// service documents; s2-lite uses express), 7-day retention,
// client-prefer, capped timestamps, no delete-on-empty.
func DefaultStreamConfig() EffectiveStreamConfig {
	return EffectiveStreamConfig{
		StorageClass:     StorageStandard,
		Retention:        RetentionPolicy{AgeSecs: DefaultRetentionAgeSecs},
		TimestampingMode: ClientPrefer,
	}
}

// Resolve merges c over the basin's default stream config (nil: none) over
// the built-in defaults.
func (c StreamConfig) Resolve(basinDefault *StreamConfig) EffectiveStreamConfig {
	m := c
	if basinDefault != nil {
		m = c.Merge(*basinDefault)
	}
	e := DefaultStreamConfig()
	if m.StorageClass != nil {
		e.StorageClass = *m.StorageClass
	}
	if m.RetentionPolicy != nil {
		e.Retention = *m.RetentionPolicy
	}
	if m.Timestamping != nil {
		if m.Timestamping.Mode != nil {
			e.TimestampingMode = *m.Timestamping.Mode
		}
		if m.Timestamping.Uncapped != nil {
			e.Uncapped = *m.Timestamping.Uncapped
		}
	}
	if m.DeleteOnEmpty != nil {
		e.DeleteOnEmptyMinAgeSecs = m.DeleteOnEmpty.MinAgeSecs
	}
	return e
}

// StreamConfig renders the resolved config with every field set: the body
// of GET and PATCH on a stream.
func (e EffectiveStreamConfig) StreamConfig() StreamConfig {
	sc, ret, mode, unc := e.StorageClass, e.Retention, e.TimestampingMode, e.Uncapped
	return StreamConfig{
		StorageClass:    &sc,
		RetentionPolicy: &ret,
		Timestamping:    &TimestampingConfig{Mode: &mode, Uncapped: &unc},
		DeleteOnEmpty:   &DeleteOnEmptyConfig{MinAgeSecs: e.DeleteOnEmptyMinAgeSecs},
	}
}

// Patch is one field of a reconfiguration: absent (Set false) keeps the
// current value, JSON null (Set, Value nil) resets it to unset, a value sets
// it.
type Patch[T any] struct {
	Set   bool
	Value *T
}

// SetTo is a patch that sets v.
func SetTo[T any](v T) Patch[T] { return Patch[T]{Set: true, Value: &v} }

// Unset is a patch that resets a field (JSON null).
func Unset[T any]() Patch[T] { return Patch[T]{Set: true} }

// IsZero makes an absent patch vanish under `json:",omitzero"`.
func (p Patch[T]) IsZero() bool { return !p.Set }

func (p Patch[T]) MarshalJSON() ([]byte, error) {
	if p.Value == nil {
		return []byte("null"), nil
	}
	return json.Marshal(*p.Value)
}

func (p *Patch[T]) UnmarshalJSON(b []byte) error {
	p.Set = true
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		p.Value = nil
		return nil
	}
	v := new(T)
	if err := json.Unmarshal(b, v); err != nil {
		return err
	}
	p.Value = v
	return nil
}

// apply returns the patched value of cur.
func (p Patch[T]) apply(cur *T) *T {
	if !p.Set {
		return cur
	}
	return p.Value
}

// TimestampingReconfiguration patches timestamping field by field.
type TimestampingReconfiguration struct {
	Mode     Patch[TimestampingMode] `json:"mode,omitzero"`
	Uncapped Patch[bool]             `json:"uncapped,omitzero"`
}

// DeleteOnEmptyReconfiguration patches delete-on-empty.
type DeleteOnEmptyReconfiguration struct {
	MinAgeSecs Patch[uint64] `json:"min_age_secs,omitzero"`
}

// StreamReconfiguration is the body of PATCH on a stream.
type StreamReconfiguration struct {
	StorageClass    Patch[StorageClass]                 `json:"storage_class,omitzero"`
	RetentionPolicy Patch[RetentionPolicy]              `json:"retention_policy,omitzero"`
	Timestamping    Patch[TimestampingReconfiguration]  `json:"timestamping,omitzero"`
	DeleteOnEmpty   Patch[DeleteOnEmptyReconfiguration] `json:"delete_on_empty,omitzero"`
}

// Validate checks the values a reconfiguration sets (422 invalid).
func (r *StreamReconfiguration) Validate() *Error {
	if p := r.RetentionPolicy.Value; p != nil && !p.Infinite && p.AgeSecs == 0 {
		return Invalid("retention_policy.age must be greater than 0 seconds")
	}
	return nil
}

// Reconfigure applies r to c. A null timestamping or delete_on_empty resets
// the whole group; an object patches its fields.
func (c StreamConfig) Reconfigure(r StreamReconfiguration) StreamConfig {
	out := c
	out.StorageClass = r.StorageClass.apply(c.StorageClass)
	out.RetentionPolicy = r.RetentionPolicy.apply(c.RetentionPolicy)
	if r.Timestamping.Set {
		out.Timestamping = nil
		if tr := r.Timestamping.Value; tr != nil {
			var cur TimestampingConfig
			if c.Timestamping != nil {
				cur = *c.Timestamping
			}
			cur.Mode = tr.Mode.apply(cur.Mode)
			cur.Uncapped = tr.Uncapped.apply(cur.Uncapped)
			out.Timestamping = &cur
		}
	}
	if r.DeleteOnEmpty.Set {
		out.DeleteOnEmpty = nil
		if dr := r.DeleteOnEmpty.Value; dr != nil {
			var cur *uint64
			if c.DeleteOnEmpty != nil {
				cur = Uint64(c.DeleteOnEmpty.MinAgeSecs)
			}
			if v := dr.MinAgeSecs.apply(cur); v != nil {
				out.DeleteOnEmpty = &DeleteOnEmptyConfig{MinAgeSecs: *v}
			}
		}
	}
	return out
}

// BasinConfig is a basin's config.
type BasinConfig struct {
	// DefaultStreamConfig fills unset fields of the basin's stream configs.
	DefaultStreamConfig *StreamConfig `json:"default_stream_config,omitempty"`
	// CreateStreamOnAppend and CreateStreamOnRead create a missing stream
	// with the defaults instead of failing 404.
	CreateStreamOnAppend bool `json:"create_stream_on_append"`
	CreateStreamOnRead   bool `json:"create_stream_on_read"`
	// StreamCipher is the cipher a stream created in the basin encrypts
	// its records with (with the key of each request's s2-encryption-key):
	// CipherAES256GCM, or unset for none. S2's aegis-256 is not offered.
	StreamCipher *string `json:"stream_cipher,omitempty"`
	// Quotas is starlog's extension: the basin's quotas (BasinQuotas).
	Quotas *BasinQuotas `json:"quotas,omitempty"`
}

// Stream ciphers (S2's EncryptionAlgorithm).
const (
	CipherAES256GCM = "aes-256-gcm"
	CipherAegis256  = "aegis-256"
)

// validateCipher checks a stream_cipher value (422 invalid).
func validateCipher(c string) *Error {
	switch c {
	case CipherAES256GCM:
		return nil
	case CipherAegis256:
		return Invalid("stream_cipher %q is not offered: use %q", c, CipherAES256GCM)
	}
	return Invalid("stream_cipher must be %q, got %q", CipherAES256GCM, c)
}

// Validate checks a basin config (422 invalid).
func (c *BasinConfig) Validate() *Error {
	if c.DefaultStreamConfig != nil {
		if err := c.DefaultStreamConfig.Validate(); err != nil {
			err.Message = "default_stream_config: " + err.Message
			return err
		}
	}
	if c.Quotas != nil {
		if err := c.Quotas.Validate(); err != nil {
			return err
		}
	}
	if c.StreamCipher != nil {
		return validateCipher(*c.StreamCipher)
	}
	return nil
}

// BasinReconfiguration is the body of PATCH on a basin.
type BasinReconfiguration struct {
	DefaultStreamConfig  Patch[StreamReconfiguration] `json:"default_stream_config,omitzero"`
	CreateStreamOnAppend Patch[bool]                  `json:"create_stream_on_append,omitzero"`
	CreateStreamOnRead   Patch[bool]                  `json:"create_stream_on_read,omitzero"`
	StreamCipher         Patch[string]                `json:"stream_cipher,omitzero"`
	// Quotas (starlog's extension) patches the quotas field by field.
	Quotas Patch[BasinQuotasReconfiguration] `json:"quotas,omitzero"`
}

// Validate checks the values a basin reconfiguration sets (422 invalid).
func (r *BasinReconfiguration) Validate() *Error {
	if v := r.DefaultStreamConfig.Value; v != nil {
		if err := v.Validate(); err != nil {
			err.Message = "default_stream_config: " + err.Message
			return err
		}
	}
	if v := r.Quotas.Value; v != nil {
		if err := v.Validate(); err != nil {
			return err
		}
	}
	if r.StreamCipher.Value != nil {
		return validateCipher(*r.StreamCipher.Value)
	}
	return nil
}

// Reconfigure applies r to c. A null default_stream_config clears it; a
// null flag resets it to false.
func (c BasinConfig) Reconfigure(r BasinReconfiguration) BasinConfig {
	out := c
	if r.DefaultStreamConfig.Set {
		out.DefaultStreamConfig = nil
		if sr := r.DefaultStreamConfig.Value; sr != nil {
			var cur StreamConfig
			if c.DefaultStreamConfig != nil {
				cur = *c.DefaultStreamConfig
			}
			next := cur.Reconfigure(*sr)
			out.DefaultStreamConfig = &next
		}
	}
	if r.CreateStreamOnAppend.Set {
		out.CreateStreamOnAppend = r.CreateStreamOnAppend.Value != nil && *r.CreateStreamOnAppend.Value
	}
	if r.CreateStreamOnRead.Set {
		out.CreateStreamOnRead = r.CreateStreamOnRead.Value != nil && *r.CreateStreamOnRead.Value
	}
	out.StreamCipher = r.StreamCipher.apply(c.StreamCipher)
	out.Quotas = reconfigureQuotas(c.Quotas, r.Quotas)
	return out
}

// isEmptyJSON reports whether a body means "no value": empty, blank or null.
func isEmptyJSON(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) == 0 || bytes.Equal(b, []byte("null"))
}

// DecodeStreamConfig decodes and validates a StreamConfig body (PUT ensure
// on a stream, where an empty body is an empty config). Malformed JSON is
// 400 bad_json; invalid values are 422 invalid.
func DecodeStreamConfig(body []byte) (StreamConfig, *Error) {
	var c StreamConfig
	if isEmptyJSON(body) {
		return c, nil
	}
	if err := UnmarshalText(body, &c); err != nil {
		return StreamConfig{}, BadJSON("stream config: %s", jsonMessage(err))
	}
	if err := c.Validate(); err != nil {
		return StreamConfig{}, err
	}
	return c, nil
}

// ParseStreamConfigHeader decodes the S2-Stream-Config header (the config
// of a stream auto-created by an append or read). Malformed JSON is 400
// bad_header.
func ParseStreamConfigHeader(v string) (StreamConfig, *Error) {
	c, err := DecodeStreamConfig([]byte(v))
	if err != nil && err.Code == CodeBadJSON {
		err.Code = CodeBadHeader
	}
	return c, err
}

// DecodeStreamReconfiguration decodes and validates a PATCH body for a
// stream; an empty body changes nothing.
func DecodeStreamReconfiguration(body []byte) (StreamReconfiguration, *Error) {
	var r StreamReconfiguration
	if isEmptyJSON(body) {
		return r, nil
	}
	if err := UnmarshalText(body, &r); err != nil {
		return StreamReconfiguration{}, BadJSON("stream reconfiguration: %s", jsonMessage(err))
	}
	if err := r.Validate(); err != nil {
		return StreamReconfiguration{}, err
	}
	return r, nil
}

// DecodeBasinConfig decodes and validates a BasinConfig; an empty body is an
// empty config.
func DecodeBasinConfig(body []byte) (BasinConfig, *Error) {
	var c BasinConfig
	if isEmptyJSON(body) {
		return c, nil
	}
	if err := UnmarshalText(body, &c); err != nil {
		return BasinConfig{}, BadJSON("basin config: %s", jsonMessage(err))
	}
	if err := c.Validate(); err != nil {
		return BasinConfig{}, err
	}
	return c, nil
}

// DecodeBasinReconfiguration decodes and validates a PATCH body for a
// basin; an empty body changes nothing.
func DecodeBasinReconfiguration(body []byte) (BasinReconfiguration, *Error) {
	var r BasinReconfiguration
	if isEmptyJSON(body) {
		return r, nil
	}
	if err := UnmarshalText(body, &r); err != nil {
		return BasinReconfiguration{}, BadJSON("basin reconfiguration: %s", jsonMessage(err))
	}
	if err := r.Validate(); err != nil {
		return BasinReconfiguration{}, err
	}
	return r, nil
}
