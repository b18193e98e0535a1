package meta

import (
	"context"
	"strings"
)

// Row kinds name the rows of the schema (docs/design.md §5) with a fixed,
// small set of values, so a count of writes by kind stays bounded whatever
// the ids in the keys (shared/meta/metrics counts writes by them).
const (
	RowRef           = "ref" // a span ref or a catalog row: the same key space
	RowMarker        = "marker"
	RowMarkerShard   = "marker_shard"
	RowHead          = "head"
	RowEpoch         = "epoch"
	RowSettleClaim   = "settle_claim"
	RowSettleDue     = "settle_due"
	RowJobClaim      = "job_claim"
	RowLease         = "lease"
	RowStreamMeta    = "stream_meta"
	RowTombstone     = "tombstone"
	RowStreamName    = "stream_name"
	RowBasin         = "basin"
	RowProducers     = "producer_checkpoint"
	RowRegistry      = "registry"
	RowDirectory     = "directory" // the star, chain and basin directories
	RowReclaim       = "reclaim"
	RowReclaimStream = "reclaim_stream"
	RowSettleFail    = "settle_fail"
	RowToken         = "token"
	RowFacade        = "facade" // the Durable Streams and Kafka faces' rows
	RowQuota         = "quota"  // a star's usage of a basin with a quota
	RowOther         = "other"
)

// RowKind names the kind of the row at pk/sk.
func RowKind(pk, sk string) string {
	head, _, _ := strings.Cut(pk, "#")
	switch {
	case strings.HasPrefix(pk, "stream#"):
		switch {
		case strings.HasPrefix(sk, RefPrefix):
			return RowRef
		case sk == "lease":
			return RowLease
		case sk == "meta":
			return RowStreamMeta
		case sk == "deleted":
			return RowTombstone
		}
	case strings.HasPrefix(pk, "chain#"):
		switch {
		case strings.HasPrefix(sk, MarkerShardPrefix):
			return RowMarkerShard
		case strings.HasPrefix(sk, MarkerPrefix):
			return RowMarker
		case sk == "head":
			return RowHead
		case strings.HasPrefix(sk, "e#"):
			return RowEpoch
		case sk == "claim":
			return RowSettleClaim
		case sk == "due":
			return RowSettleDue
		case strings.HasPrefix(sk, "jobclaim/"):
			return RowJobClaim
		}
	case strings.HasPrefix(pk, "basin#"):
		if sk == "cfg" {
			return RowBasin
		}
		return RowStreamName
	case strings.HasPrefix(pk, "producers#"):
		return RowProducers
	case strings.HasPrefix(pk, "star#"):
		return RowRegistry
	case pk == "stars" || pk == "chains" || pk == BasinDirPK:
		return RowDirectory
	case pk == ReclaimPK, pk == ReclaimPK+"-cursor":
		return RowReclaim
	case pk == ReclaimStreamsPK:
		return RowReclaimStream
	case pk == SettleFailPK:
		return RowSettleFail
	case pk == TokensPK:
		return RowToken
	case head == "ds" || head == "kafka":
		return RowFacade
	case strings.HasPrefix(pk, QuotaPKPrefix):
		return RowQuota
	}
	return RowOther
}

// Writers name who writes through a store, for the count of writes by
// writer: the star itself unless its context says otherwise, the auditor's
// passes and jobs by name (a fixed set: Writer maps anything else to
// WriterOther).
const (
	WriterStar        = "star"
	WriterAuditor     = "auditor" // the auditor, outside the passes and jobs below
	WriterPlan        = "plan"
	WriterJanitor     = "janitor"
	WriterRetention   = "retention"
	WriterReclaim     = "reclaim"
	WriterSettle      = "settle"
	WriterTrim        = "trim"
	WriterChainSettle = "chain-settle"
	WriterOther       = "other"
)

type writerKey struct{}

// WithWriter marks ctx's metastore writes as the named writer's.
func WithWriter(ctx context.Context, w string) context.Context {
	return context.WithValue(ctx, writerKey{}, w)
}

// Writer is the writer ctx names (WithWriter), or def when it names none.
func Writer(ctx context.Context, def string) string {
	w, ok := ctx.Value(writerKey{}).(string)
	if !ok {
		return def
	}
	switch w {
	case WriterStar, WriterAuditor, WriterPlan, WriterJanitor, WriterRetention, WriterReclaim, WriterSettle, WriterTrim, WriterChainSettle:
		return w
	}
	return WriterOther
}
