package reader

import "github.com/starlog/starlog/shared/format"

// SettledKey is the derivable key of a settled object (format.SettledKey):
// the settle job that writes the object and every reader derive it there.
func SettledKey(basin, streamID string, epoch, firstSeq, revision uint64) string {
	return format.SettledKey(basin, streamID, epoch, firstSeq, revision)
}
