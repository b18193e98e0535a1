package format

import "fmt"

// SettledKey is the derivable key of a settled object in the standard
// bucket (docs/design.md §4.2): streams/<basin>/<streamID>/<epoch>/<firstSeq>, with
// "~<revision>" appended for rewrites (revision > 0). Numbers are zero-padded
// to 20 digits like every other key, so a listing sorts numerically. The
// settle job that writes the object and every reader derive it here, so
// they cannot disagree.
func SettledKey(basin, streamID string, epoch, firstSeq, revision uint64) string {
	k := fmt.Sprintf("streams/%s/%s/%020d/%020d", basin, streamID, epoch, firstSeq)
	if revision > 0 {
		k += fmt.Sprintf("~%020d", revision)
	}
	return k
}
