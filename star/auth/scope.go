// Package auth is S2's access-token model as a star enforces it: token
// scopes (resource sets, operation groups, explicit operations), the
// operation every request needs, auto-prefixed stream names, the rule a
// token issuing another must follow, and the keys derived from the
// cluster's internal key. It is pure logic, no I/O: the server looks
// tokens up (star/server/tokens.go) and asks this package what they allow.
//
// The wire forms follow S2's OpenAPI spec and the TypeScript SDK 0.27.0
// (AccessTokenScope, ResourceSet, PermittedOperationGroups, Operation).
package auth

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/starlog/starlog/shared/api"
)

// Op is one of S2's operation names (the `ops` of a scope).
type Op string

// S2's operations, in the spec's order.
const (
	ListBasins         Op = "list-basins"
	CreateBasin        Op = "create-basin"
	DeleteBasin        Op = "delete-basin"
	ReconfigureBasin   Op = "reconfigure-basin"
	GetBasinConfig     Op = "get-basin-config"
	IssueAccessToken   Op = "issue-access-token"
	RevokeAccessToken  Op = "revoke-access-token"
	ListAccessTokens   Op = "list-access-tokens"
	ListStreams        Op = "list-streams"
	CreateStream       Op = "create-stream"
	DeleteStream       Op = "delete-stream"
	GetStreamConfig    Op = "get-stream-config"
	ReconfigureStream  Op = "reconfigure-stream"
	CheckTail          Op = "check-tail"
	Append             Op = "append"
	Read               Op = "read"
	Trim               Op = "trim"
	Fence              Op = "fence"
	AccountMetrics     Op = "account-metrics"
	BasinMetrics       Op = "basin-metrics"
	StreamMetrics      Op = "stream-metrics"
	ListLocations      Op = "list-locations"
	GetDefaultLocation Op = "get-default-location"
	SetDefaultLocation Op = "set-default-location"
)

// AllOps lists every operation, in the spec's order.
var AllOps = []Op{
	ListBasins, CreateBasin, DeleteBasin, ReconfigureBasin, GetBasinConfig,
	IssueAccessToken, RevokeAccessToken, ListAccessTokens,
	ListStreams, CreateStream, DeleteStream, GetStreamConfig, ReconfigureStream,
	CheckTail, Append, Read, Trim, Fence,
	AccountMetrics, BasinMetrics, StreamMetrics,
	ListLocations, GetDefaultLocation, SetDefaultLocation,
}

// Valid reports whether o is one of S2's operations.
func (o Op) Valid() bool { return slices.Contains(AllOps, o) }

// Group is an operation group of a scope's op_groups.
type Group uint8

const (
	GroupAccount Group = iota
	GroupBasin
	GroupStream
)

// groupOf places every operation in a group and says whether it writes.
// S2's docs describe the groups (account: basins and tokens; basin: the
// basin's own config and metrics; stream: the streams of a basin, their
// records and config) without a normative table; this is our reading,
// documented in docs/security.md.
var groupOf = map[Op]struct {
	g     Group
	write bool
}{
	ListBasins: {GroupAccount, false}, ListAccessTokens: {GroupAccount, false},
	AccountMetrics: {GroupAccount, false}, ListLocations: {GroupAccount, false},
	GetDefaultLocation: {GroupAccount, false},
	CreateBasin:        {GroupAccount, true}, DeleteBasin: {GroupAccount, true},
	IssueAccessToken: {GroupAccount, true}, RevokeAccessToken: {GroupAccount, true},
	SetDefaultLocation: {GroupAccount, true},
	GetBasinConfig:     {GroupBasin, false}, BasinMetrics: {GroupBasin, false},
	ReconfigureBasin: {GroupBasin, true},
	ListStreams:      {GroupStream, false}, GetStreamConfig: {GroupStream, false},
	CheckTail: {GroupStream, false}, Read: {GroupStream, false}, StreamMetrics: {GroupStream, false},
	CreateStream: {GroupStream, true}, DeleteStream: {GroupStream, true},
	ReconfigureStream: {GroupStream, true}, Append: {GroupStream, true},
	Trim: {GroupStream, true}, Fence: {GroupStream, true},
}

// GroupOf returns o's group and whether it is a write.
func GroupOf(o Op) (Group, bool) { e := groupOf[o]; return e.g, e.write }

// ResourceSet is a set of names: none, one exact name, or every name with
// a prefix. On the wire it is {"exact": name} or {"prefix": p}; an absent
// set and {"exact": ""} are the empty set, {"prefix": ""} is every name.
type ResourceSet struct {
	// Prefix says Value is a prefix; otherwise an empty Value is the empty
	// set and a non-empty one the exact name.
	Prefix bool
	Value  string
}

// None is the empty set; All matches every name.
var (
	None = ResourceSet{}
	All  = ResourceSet{Prefix: true}
)

// Exact is the set of one name; PrefixSet every name starting with p.
func Exact(name string) ResourceSet  { return ResourceSet{Value: name} }
func PrefixSet(p string) ResourceSet { return ResourceSet{Prefix: true, Value: p} }

// IsNone reports whether s matches nothing.
func (s ResourceSet) IsNone() bool { return !s.Prefix && s.Value == "" }

// Contains reports whether name is in s.
func (s ResourceSet) Contains(name string) bool {
	if s.Prefix {
		return strings.HasPrefix(name, s.Value)
	}
	return s.Value != "" && name == s.Value
}

// Within reports whether every name of s is in parent.
func (s ResourceSet) Within(parent ResourceSet) bool {
	switch {
	case s.IsNone():
		return true
	case !s.Prefix:
		return parent.Contains(s.Value)
	default: // an infinite set fits only in a prefix set
		return parent.Prefix && strings.HasPrefix(s.Value, parent.Value)
	}
}

// Narrow returns the list prefix that enumerates exactly the names of s
// that start with want, and false when no name can match (a listing of s
// filtered by want is then empty). An exact set narrows to its own name
// (the caller still filters for equality: longer names share the prefix).
func (s ResourceSet) Narrow(want string) (string, bool) {
	switch {
	case s.IsNone():
		return "", false
	case !s.Prefix:
		return s.Value, strings.HasPrefix(s.Value, want)
	case strings.HasPrefix(want, s.Value):
		return want, true
	case strings.HasPrefix(s.Value, want):
		return s.Value, true
	}
	return "", false
}

func (s ResourceSet) MarshalJSON() ([]byte, error) {
	if s.Prefix {
		return json.Marshal(map[string]string{"prefix": s.Value})
	}
	return json.Marshal(map[string]string{"exact": s.Value})
}

func (s *ResourceSet) UnmarshalJSON(b []byte) error {
	var w struct {
		Exact  *string `json:"exact"`
		Prefix *string `json:"prefix"`
	}
	if err := strictUnmarshal(b, &w); err != nil {
		return err
	}
	switch {
	case w.Exact != nil && w.Prefix != nil:
		return fmt.Errorf("a resource set is either exact or prefix, not both")
	case w.Exact != nil:
		*s = Exact(*w.Exact)
	case w.Prefix != nil:
		*s = PrefixSet(*w.Prefix)
	default:
		return fmt.Errorf("a resource set needs exact or prefix")
	}
	return nil
}

// ReadWrite is one group's permissions.
type ReadWrite struct {
	Read  bool `json:"read"`
	Write bool `json:"write"`
}

// OpGroups is a scope's op_groups.
type OpGroups struct {
	Account ReadWrite `json:"account"`
	Basin   ReadWrite `json:"basin"`
	Stream  ReadWrite `json:"stream"`
}

func (g OpGroups) of(grp Group) ReadWrite {
	switch grp {
	case GroupAccount:
		return g.Account
	case GroupBasin:
		return g.Basin
	}
	return g.Stream
}

// Scope is what a token may do: the union of its op groups and explicit
// ops, on the basins, streams and token ids of its resource sets.
type Scope struct {
	Basins       ResourceSet
	Streams      ResourceSet
	AccessTokens ResourceSet
	OpGroups     OpGroups
	Ops          []Op
}

// FullScope is the admin token's: every operation on every resource.
func FullScope() Scope {
	rw := ReadWrite{Read: true, Write: true}
	return Scope{Basins: All, Streams: All, AccessTokens: All,
		OpGroups: OpGroups{Account: rw, Basin: rw, Stream: rw}}
}

// Allows reports whether the scope's operations include o.
func (s Scope) Allows(o Op) bool {
	if slices.Contains(s.Ops, o) {
		return true
	}
	e, ok := groupOf[o]
	if !ok {
		return false
	}
	p := s.OpGroups.of(e.g)
	return (e.write && p.Write) || (!e.write && p.Read)
}

// scopeJSON is the wire form. Absent resource sets are the empty set; S2
// lists them as absent (null) too.
type scopeJSON struct {
	Basins       *ResourceSet `json:"basins,omitempty"`
	Streams      *ResourceSet `json:"streams,omitempty"`
	AccessTokens *ResourceSet `json:"access_tokens,omitempty"`
	OpGroups     *OpGroups    `json:"op_groups,omitempty"`
	Ops          []Op         `json:"ops"`
}

func optSet(s ResourceSet) *ResourceSet {
	if s.IsNone() {
		return nil
	}
	return &s
}

func (s Scope) MarshalJSON() ([]byte, error) {
	ops := s.Ops
	if ops == nil {
		ops = []Op{}
	}
	return json.Marshal(scopeJSON{
		Basins: optSet(s.Basins), Streams: optSet(s.Streams), AccessTokens: optSet(s.AccessTokens),
		OpGroups: &s.OpGroups, Ops: ops,
	})
}

func (s *Scope) UnmarshalJSON(b []byte) error {
	var w struct {
		Basins       *ResourceSet `json:"basins"`
		Streams      *ResourceSet `json:"streams"`
		AccessTokens *ResourceSet `json:"access_tokens"`
		OpGroups     *struct {
			Account, Basin, Stream *struct {
				Read  *bool `json:"read"`
				Write *bool `json:"write"`
			}
		} `json:"op_groups"`
		Ops []Op `json:"ops"`
	}
	if err := strictUnmarshal(b, &w); err != nil {
		return err
	}
	*s = Scope{}
	for _, p := range []struct {
		in  *ResourceSet
		out *ResourceSet
	}{{w.Basins, &s.Basins}, {w.Streams, &s.Streams}, {w.AccessTokens, &s.AccessTokens}} {
		if p.in != nil {
			*p.out = *p.in
		}
	}
	if g := w.OpGroups; g != nil {
		for _, p := range []struct {
			in *struct {
				Read  *bool `json:"read"`
				Write *bool `json:"write"`
			}
			out *ReadWrite
		}{{g.Account, &s.OpGroups.Account}, {g.Basin, &s.OpGroups.Basin}, {g.Stream, &s.OpGroups.Stream}} {
			if p.in != nil {
				p.out.Read = p.in.Read != nil && *p.in.Read
				p.out.Write = p.in.Write != nil && *p.in.Write
			}
		}
	}
	for _, o := range w.Ops {
		if !o.Valid() {
			return fmt.Errorf("unknown operation %q", truncate(string(o), 64))
		}
		if !slices.Contains(s.Ops, o) {
			s.Ops = append(s.Ops, o)
		}
	}
	return nil
}

// Validate checks the names of the scope's sets: a basin name or prefix
// in S2's basin alphabet, a stream name or prefix of at most 512 bytes, a
// token id or prefix of at most MaxTokenIDBytes.
func (s Scope) Validate() *api.Error {
	if !s.Basins.IsNone() {
		if s.Basins.Prefix {
			if err := validBasinPrefix(s.Basins.Value); err != nil {
				return err
			}
		} else if err := api.ValidateBasinName(s.Basins.Value); err != nil {
			return api.Invalid("scope.basins: %s", err.Message)
		}
	}
	if !s.Streams.IsNone() {
		if s.Streams.Prefix {
			if len(s.Streams.Value) > api.MaxStreamNameLen {
				return api.Invalid("scope.streams: prefix longer than %d bytes", api.MaxStreamNameLen)
			}
		} else if err := api.ValidateStreamName(s.Streams.Value); err != nil {
			return api.Invalid("scope.streams: %s", err.Message)
		}
	}
	if !s.AccessTokens.IsNone() {
		if s.AccessTokens.Prefix {
			if len(s.AccessTokens.Value) > MaxTokenIDBytes {
				return api.Invalid("scope.access_tokens: prefix longer than %d bytes", MaxTokenIDBytes)
			}
		} else if err := ValidateTokenID(s.AccessTokens.Value); err != nil {
			return api.Invalid("scope.access_tokens: %s", err.Message)
		}
	}
	return nil
}

func validBasinPrefix(p string) *api.Error {
	if len(p) > api.MaxBasinNameLen {
		return api.Invalid("scope.basins: prefix longer than %d bytes", api.MaxBasinNameLen)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0) {
			return api.Invalid("scope.basins: prefix %q: basin names are lowercase letters, digits and hyphens, starting with a letter or digit", truncate(p, 64))
		}
	}
	return nil
}

// MaxTokenIDBytes bounds a token id (S2: 1–96 bytes).
const MaxTokenIDBytes = 96

// ValidateTokenID checks an access token id as S2 does: 1–96 bytes, not
// "." or "..", and (for the TS SDK) no NUL byte and valid UTF-8.
func ValidateTokenID(id string) *api.Error {
	switch {
	case id == "":
		return api.Invalid("access token id must not be empty")
	case id == "." || id == "..":
		return api.Invalid("access token id must not be %q", id)
	case len(id) > MaxTokenIDBytes:
		return api.Invalid("access token id must not exceed %d bytes", MaxTokenIDBytes)
	case strings.IndexByte(id, 0) >= 0 || !utf8.ValidString(id):
		return api.Invalid("access token id must be UTF-8 without NUL bytes")
	}
	return nil
}

// strictUnmarshal rejects unknown fields, so a misspelt scope field is an
// error rather than a silently narrower (or wider) token.
func strictUnmarshal(b []byte, v any) error {
	if err := api.CheckJSONText(b); err != nil {
		return err // U+FFFD would be stored for what was sent
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return fmt.Errorf("trailing data after the JSON value")
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
