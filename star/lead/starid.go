package lead

import (
	"fmt"
	"os"
	"strings"
)

// A star's id names its registry row, its chains and its slot keys.

// maxStarIDLen keeps slot keys and metastore keys short.
const maxStarIDLen = 63

// ValidateStarID checks a star id: 1–63 bytes of lower-case letters,
// digits and inner hyphens. It appears in object keys and metastore keys,
// where '/' and ':' are separators.
func ValidateStarID(id string) error {
	if id == "" || len(id) > maxStarIDLen {
		return fmt.Errorf("star id %q: must be 1 to %d bytes", id, maxStarIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0 && i < len(id)-1
		if !ok {
			return fmt.Errorf("star id %q: only a-z, 0-9 and inner hyphens are allowed", id)
		}
	}
	return nil
}

// DefaultStarID derives a star id from the hostname: lower-cased, every
// other character replaced by '-', trimmed to the allowed length.
func DefaultStarID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "star"
	}
	return SanitizeStarID(h)
}

// SanitizeStarID turns any string into a valid star id ("star" if nothing
// usable is left).
func SanitizeStarID(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	id := strings.Trim(b.String(), "-")
	if len(id) > maxStarIDLen {
		id = strings.Trim(id[:maxStarIDLen], "-")
	}
	if id == "" {
		return "star"
	}
	return id
}
