package meta

import "time"

// The quota usage rows (docs/design.md, "Quotas per basin"): one row per
// (basin, star), quota#<basin>/<star id>, written by that star every
// quota period while the basin has a quota and the star has appended to
// it, and read by every star enforcing the basin's quota (star/quota).
// One partition per basin, so a star reads the others' rows in one query.

// QuotaPKPrefix starts the partition of a basin's usage rows.
const QuotaPKPrefix = "quota#"

// QuotaUsageKey is star's usage row for basin.
func QuotaUsageKey(basin, star string) Key { return Key{PK: QuotaPKPrefix + basin, SK: star} }

// QuotaUsageRow is what one star last knew of its use of one basin.
type QuotaUsageRow struct {
	// BasinID is the basin's incarnation the figures are for: a row of an
	// earlier incarnation is ignored.
	BasinID string `json:"basin_id"`
	// AppendBytesPerSec is the metered bytes per second this star admitted
	// to the basin over the quota window.
	AppendBytesPerSec uint64 `json:"append_bytes_per_sec"`
	// StoredBytes is the basin's stored bytes as this star last read them
	// (0: not read, the basin has no stored-bytes quota).
	StoredBytes uint64 `json:"stored_bytes"`
	// At is when the star wrote the row: a row older than the staleness
	// bound is a star that stopped, and counts for nothing.
	At time.Time `json:"at"`
}

// DecodeQuotaUsageRow decodes a usage row.
func DecodeQuotaUsageRow(it Item) (QuotaUsageRow, error) {
	return decodeRow[QuotaUsageRow](it)
}
