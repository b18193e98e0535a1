package objstore

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Rules every backend applies the same way, so a layout that works on one
// backend works on all of them (versitygw's posix mapping being the
// strictest).

// ErrInvalidKey rejects a key no backend can store identically: empty, too
// long, not UTF-8, with a NUL, a leading or trailing '/', an empty segment,
// or a "." or ".." segment.
var ErrInvalidKey = errors.New("objstore: invalid key")

// ErrKeyConflict is the definite refusal of a key that is a "folder" of an
// existing key, or that has an existing key as a folder ("a" vs "a/b").
// versitygw answers 409 ObjectParentIsFile / ExistingObjectIsDirectory.
var ErrKeyConflict = errors.New("objstore: key conflicts with a nested key")

// ErrPartTooSmall is the definite refusal of a multipart upload in which a
// part other than the last is smaller than MinPartSize (S3's EntityTooSmall).
var ErrPartTooSmall = errors.New("objstore: multipart part smaller than the minimum")

// MaxKeyLen is S3's key length limit in bytes.
const MaxKeyLen = 1024

// MaxParts is S3's limit on the parts of one multipart upload.
const MaxParts = 10000

// ValidateKey reports whether key is storable on every backend.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes (max %d)", ErrInvalidKey, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: %q is not UTF-8", ErrInvalidKey, key)
	case strings.IndexByte(key, 0) >= 0:
		return fmt.Errorf("%w: %q contains NUL", ErrInvalidKey, key)
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return fmt.Errorf("%w: %q has an empty segment", ErrInvalidKey, key)
		case ".", "..":
			return fmt.Errorf("%w: %q has a %q segment", ErrInvalidKey, key, seg)
		}
	}
	return nil
}

// ValidateBucketName applies S3's bucket naming rules (3–63 bytes of
// lowercase letters, digits, '.' and '-', starting and ending with a letter
// or digit), which also make a safe directory name. S3 Express names
// (`name--az-id--x-s3`) pass.
func ValidateBucketName(name string) error {
	bad := len(name) < 3 || len(name) > 63
	for i := 0; i < len(name) && !bad; i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		edge := i == 0 || i == len(name)-1
		bad = !alnum && (edge || c != '.' && c != '-')
	}
	if bad {
		return fmt.Errorf("objstore: invalid bucket name %q", name)
	}
	return nil
}

// ParentKeys returns every proper "folder" prefix of key that could itself
// be a key: for "a/b/c" it is "a" and "a/b".
func ParentKeys(key string) []string {
	var out []string
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			out = append(out, key[:i])
		}
	}
	return out
}

// ClampRange turns a Get's (off, n) into [start, end) within an object of
// size bytes: n < 0 reads to the end, and a range past the end is truncated
// (an offset at or past the end gives an empty range). A negative offset is
// an error.
func ClampRange(size, off, n int64) (start, end int64, err error) {
	if off < 0 {
		return 0, 0, fmt.Errorf("objstore: negative offset %d", off)
	}
	if off >= size {
		return size, size, nil
	}
	end = size
	if n >= 0 && n < size-off {
		end = off + n
	}
	return off, end, nil
}

// CheckParts applies S3's part rules to the sizes of a multipart upload's
// parts, in order, at Complete.
func CheckParts(sizes []int64) error {
	if len(sizes) == 0 {
		return errors.New("objstore: multipart upload has no parts")
	}
	if len(sizes) > MaxParts {
		return fmt.Errorf("objstore: multipart upload has %d parts (max %d)", len(sizes), MaxParts)
	}
	for i, s := range sizes[:len(sizes)-1] {
		if s < MinPartSize {
			return fmt.Errorf("%w: part %d is %d bytes (min %d unless last)", ErrPartTooSmall, i+1, s, MinPartSize)
		}
	}
	return nil
}

// CheckCopyRange validates a copy part's source range against the source
// size: it must be non-empty and inside the object (S3 answers 416
// InvalidRange otherwise).
func CheckCopyRange(srcSize, off, n int64) error {
	if off < 0 || n <= 0 || off+n > srcSize || off+n < off {
		return fmt.Errorf("objstore: copy range [%d,%d) outside a %d-byte source", off, off+n, srcSize)
	}
	return nil
}
