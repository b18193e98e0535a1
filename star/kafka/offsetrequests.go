package kafka

import (
	"context"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/kafka/groups"
)

// OffsetCommit and OffsetFetch: a group's committed offsets, kept in its
// metastore row (grouprow.go).

func (cs *conn) offsetCommit(ctx context.Context, r *kmsg.OffsetCommitRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
	code := cs.groupGate(ctx, groupRead, r.Group)
	if code == 0 {
		gen := r.Generation
		if r.Version == 0 {
			gen = -1 // v0 names no member: a plain store of offsets
		}
		cs.s.groups.do(r.Group, false, func(g *groups.Group, _ time.Time) { code = g.CommitCheck(r.MemberID, gen) })
	}
	// Each partition's own check, then one put of every partition that
	// passed; its outcome is theirs.
	set := map[string]map[int32]committed{}
	codes := make([][]int16, len(r.Topics))
	for i, t := range r.Topics {
		codes[i] = make([]int16, len(t.Partitions))
		var row topicRow
		terr := error(nil)
		if code == 0 {
			row, terr = cs.s.topic(ctx, t.Topic)
		}
		for j, p := range t.Partitions {
			switch {
			case code != 0:
				codes[i][j] = code
			case cs.authorize(auth.Read, partitionStream(t.Topic, p.Partition)) != nil:
				codes[i][j] = kerr.TopicAuthorizationFailed.Code
			case terr != nil:
				codes[i][j] = codeOf(terr)
			case p.Partition < 0 || p.Partition >= row.Partitions:
				codes[i][j] = kerr.UnknownTopicOrPartition.Code
			case p.Metadata != nil && len(*p.Metadata) > MaxOffsetMetadata:
				codes[i][j] = kerr.OffsetMetadataTooLarge.Code
			default:
				c := committed{Offset: p.Offset, Epoch: -1}
				if r.Version >= 6 {
					c.Epoch = p.LeaderEpoch
				}
				if p.Metadata != nil {
					c.Meta = *p.Metadata
				}
				if set[t.Topic] == nil {
					set[t.Topic] = map[int32]committed{}
				}
				set[t.Topic][p.Partition] = c
			}
		}
	}
	var putCode int16
	if len(set) > 0 {
		putCode = groupErrCode(cs.s.commitOffsets(ctx, r.Group, set))
	}
	for i, t := range r.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for j, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, codes[i][j]
			if rp.ErrorCode == 0 {
				rp.ErrorCode = putCode
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// fetchTopic is one topic of an OffsetFetch; nil partitions of a nil
// topic list mean every committed one.
type fetchTopic struct {
	topic      string
	partitions []int32
}

type fetchedPartition struct {
	partition int32
	c         committed
	code      int16
}

type fetchedTopic struct {
	topic      string
	partitions []fetchedPartition
}

func (cs *conn) offsetFetch(ctx context.Context, r *kmsg.OffsetFetchRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
	if r.Version >= 8 {
		for _, g := range r.Groups {
			var ts []fetchTopic
			if g.Topics != nil {
				ts = []fetchTopic{}
				for _, t := range g.Topics {
					ts = append(ts, fetchTopic{topic: t.Topic, partitions: t.Partitions})
				}
			}
			got, code := cs.fetchOffsets(ctx, g.Group, ts)
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group, rg.ErrorCode = g.Group, code
			for _, t := range got {
				rt := kmsg.NewOffsetFetchResponseGroupTopic()
				rt.Topic = t.topic
				for _, p := range t.partitions {
					rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					rp.Partition, rp.Offset, rp.LeaderEpoch, rp.ErrorCode = p.partition, p.c.Offset, p.c.Epoch, p.code
					m := p.c.Meta
					rp.Metadata = &m
					rt.Partitions = append(rt.Partitions, rp)
				}
				rg.Topics = append(rg.Topics, rt)
			}
			resp.Groups = append(resp.Groups, rg)
		}
		return resp
	}
	var ts []fetchTopic
	if r.Topics != nil {
		ts = []fetchTopic{}
		for _, t := range r.Topics {
			ts = append(ts, fetchTopic{topic: t.Topic, partitions: t.Partitions})
		}
	}
	got, code := cs.fetchOffsets(ctx, r.Group, ts)
	resp.ErrorCode = code
	if code != 0 && r.Version < 2 {
		// No group-level error before v2: every partition carries it.
		got = nil
		for _, t := range ts {
			ft := fetchedTopic{topic: t.topic}
			for _, p := range t.partitions {
				ft.partitions = append(ft.partitions, fetchedPartition{partition: p, c: committed{Offset: -1, Epoch: -1}, code: code})
			}
			got = append(got, ft)
		}
	}
	for _, t := range got {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.topic
		for _, p := range t.partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch, rp.ErrorCode = p.partition, p.c.Offset, p.c.Epoch, p.code
			m := p.c.Meta
			rp.Metadata = &m
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// fetchOffsets reads a group's committed offsets from its row (always
// the metastore's: another star may have committed since this one last
// looked). A partition with none has offset -1.
func (cs *conn) fetchOffsets(ctx context.Context, group string, ts []fetchTopic) ([]fetchedTopic, int16) {
	if code := cs.groupGate(ctx, groupRead, group); code != 0 {
		return nil, code
	}
	row, _, err := cs.s.readGroupRow(ctx, group)
	if err != nil {
		return nil, groupErrCode(err)
	}
	all := ts == nil
	if all {
		for t, ps := range row.Topics {
			ft := fetchTopic{topic: t}
			for p := range ps {
				ft.partitions = append(ft.partitions, p)
			}
			sort.Slice(ft.partitions, func(i, j int) bool { return ft.partitions[i] < ft.partitions[j] })
			ts = append(ts, ft)
		}
		sort.Slice(ts, func(i, j int) bool { return ts[i].topic < ts[j].topic })
	}
	var out []fetchedTopic
	for _, t := range ts {
		ft := fetchedTopic{topic: t.topic}
		visible := cs.visible(t.topic)
		if !visible && all {
			continue // a listing leaves out what the token may not see
		}
		for _, p := range t.partitions {
			fp := fetchedPartition{partition: p, c: committed{Offset: -1, Epoch: -1}}
			if c, ok := row.Topics[t.topic][p]; ok {
				fp.c = c
			}
			if !visible {
				fp.c, fp.code = committed{Offset: -1, Epoch: -1}, kerr.TopicAuthorizationFailed.Code
			}
			ft.partitions = append(ft.partitions, fp)
		}
		out = append(out, ft)
	}
	return out, 0
}
