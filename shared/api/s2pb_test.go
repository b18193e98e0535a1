package api

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/starlog/starlog/shared/api/s2pb"
)

// The checked-in generated code carries exactly the published s2.v1 field
// numbers, kinds and presence; a regenerated file that drifts fails here.
func TestS2PBDescriptorMatchesPublishedSchema(t *testing.T) {
	type field struct {
		num      protoreflect.FieldNumber
		kind     protoreflect.Kind
		list     bool
		presence bool // explicit presence (proto3 optional or message)
	}
	want := map[string]map[string]field{
		"StreamPosition": {
			"seq_num":   {1, protoreflect.Uint64Kind, false, false},
			"timestamp": {2, protoreflect.Uint64Kind, false, false},
		},
		"Header": {
			"name":  {1, protoreflect.BytesKind, false, false},
			"value": {2, protoreflect.BytesKind, false, false},
		},
		"AppendRecord": {
			"timestamp": {1, protoreflect.Uint64Kind, false, true},
			"headers":   {2, protoreflect.MessageKind, true, false},
			"body":      {3, protoreflect.BytesKind, false, false},
		},
		"AppendInput": {
			"records":       {1, protoreflect.MessageKind, true, false},
			"match_seq_num": {2, protoreflect.Uint64Kind, false, true},
			"fencing_token": {3, protoreflect.StringKind, false, true},
		},
		"AppendAck": {
			"start": {1, protoreflect.MessageKind, false, true},
			"end":   {2, protoreflect.MessageKind, false, true},
			"tail":  {3, protoreflect.MessageKind, false, true},
		},
		"SequencedRecord": {
			"seq_num":   {1, protoreflect.Uint64Kind, false, false},
			"timestamp": {2, protoreflect.Uint64Kind, false, false},
			"headers":   {3, protoreflect.MessageKind, true, false},
			"body":      {4, protoreflect.BytesKind, false, false},
		},
		"ReadBatch": {
			"records": {1, protoreflect.MessageKind, true, false},
			"tail":    {2, protoreflect.MessageKind, false, true},
		},
	}
	fd := s2pb.File_s2_v1_s2_proto
	if fd.Package() != "s2.v1" {
		t.Fatalf("package %s", fd.Package())
	}
	msgs := fd.Messages()
	if msgs.Len() != len(want) {
		t.Fatalf("%d messages, want %d", msgs.Len(), len(want))
	}
	for name, fields := range want {
		md := msgs.ByName(protoreflect.Name(name))
		if md == nil {
			t.Fatalf("message %s missing", name)
		}
		if md.Fields().Len() != len(fields) {
			t.Errorf("%s has %d fields, want %d", name, md.Fields().Len(), len(fields))
		}
		for fname, w := range fields {
			f := md.Fields().ByName(protoreflect.Name(fname))
			if f == nil {
				t.Errorf("%s.%s missing", name, fname)
				continue
			}
			if f.Number() != w.num || f.Kind() != w.kind || f.IsList() != w.list || f.HasPresence() != w.presence {
				t.Errorf("%s.%s = #%d %v list=%v presence=%v, want #%d %v list=%v presence=%v",
					name, fname, f.Number(), f.Kind(), f.IsList(), f.HasPresence(), w.num, w.kind, w.list, w.presence)
			}
		}
	}
	// The fields docs/design.md §16 calls optional are proto3 optional (synthetic oneofs).
	for _, p := range [][2]string{{"AppendRecord", "timestamp"}, {"AppendInput", "match_seq_num"}, {"AppendInput", "fencing_token"}, {"ReadBatch", "tail"}} {
		d := msgs.ByName(protoreflect.Name(p[0])).Fields().ByName(protoreflect.Name(p[1]))
		if d == nil || d.ContainingOneof() == nil || !d.ContainingOneof().IsSynthetic() {
			t.Errorf("%s.%s is not proto3 optional", p[0], p[1])
		}
	}
}
