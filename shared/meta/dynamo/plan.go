package dynamo

import (
	"encoding/base64"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/starlog/starlog/shared/meta"
)

// Key and item limits are DynamoDB's, checked before any call so that both
// backends refuse the same things with the same errors.
const (
	maxPKBytes   = 2048
	maxSKBytes   = 1024
	maxItemBytes = 400 * 1024
)

// maxLimit caps a page's size.
const maxLimit = 10000

// checkKey rejects keys DynamoDB would reject.
func checkKey(pk, sk string) error {
	switch {
	case pk == "" || sk == "":
		return fmt.Errorf("meta/dynamo: empty key pk=%q sk=%q", pk, sk)
	case len(pk) > maxPKBytes:
		return fmt.Errorf("meta/dynamo: pk of %d bytes exceeds %d", len(pk), maxPKBytes)
	case len(sk) > maxSKBytes:
		return fmt.Errorf("meta/dynamo: sk of %d bytes exceeds %d", len(sk), maxSKBytes)
	case !utf8.ValidString(pk) || !utf8.ValidString(sk):
		return fmt.Errorf("meta/dynamo: key pk=%q sk=%q is not valid UTF-8", pk, sk)
	}
	return nil
}

// checkItem also bounds the item's size the way DynamoDB counts it:
// attribute names plus values (ver counted at its widest).
func checkItem(pk, sk string, val []byte) error {
	if err := checkKey(pk, sk); err != nil {
		return err
	}
	size := len("pk") + len(pk) + len("sk") + len(sk) + len("ver") + 21 + len("val") + len(val)
	if size > maxItemBytes {
		return fmt.Errorf("meta/dynamo: item pk=%s sk=%s of %d bytes exceeds %d", pk, sk, size, maxItemBytes)
	}
	return nil
}

// plan is a Query reduced to bounds: From ≤ sk ≤ To (empty: open), and
// after, the exclusive resume point in the query's direction.
type plan struct {
	from, to string
	after    string
	limit    int
	empty    bool // the range holds nothing: answer without asking
}

func planQuery(q meta.Query) (plan, error) {
	if q.PK == "" || len(q.PK) > maxPKBytes || !utf8.ValidString(q.PK) {
		return plan{}, fmt.Errorf("invalid pk %q", q.PK)
	}
	if len(q.From) > maxSKBytes || len(q.To) > maxSKBytes {
		return plan{}, fmt.Errorf("sk bound longer than %d bytes", maxSKBytes)
	}
	if q.Limit < 0 {
		return plan{}, fmt.Errorf("negative limit %d", q.Limit)
	}
	p := plan{from: q.From, to: q.To, limit: q.Limit}
	if p.limit == 0 {
		p.limit = DefaultLimit
	}
	// A page may hold fewer items than asked, so capping is within the
	// contract; it keeps one page's memory bounded.
	p.limit = min(p.limit, maxLimit)
	if p.from != "" && p.to != "" && p.from > p.to {
		p.empty = true
		return p, nil
	}
	if q.PageToken == "" {
		return p, nil
	}
	last, err := decodeToken(q.PageToken)
	if err != nil {
		return plan{}, err
	}
	// A resume point outside the range either ends the query or does not
	// restrict it; only an inside one becomes the exclusive bound.
	if !q.Backward {
		switch {
		case p.to != "" && last >= p.to:
			p.empty = true
		case p.from == "" || last >= p.from:
			p.after = last
		}
	} else {
		switch {
		case p.from != "" && last <= p.from:
			p.empty = true
		case p.to == "" || last <= p.to:
			p.after = last
		}
	}
	return p, nil
}

// tokenVersion tags this backend's page tokens so a token from another
// backend or a corrupted one is rejected instead of misread.
const tokenVersion = 'd'

var errBadToken = errors.New("invalid page token")

// encodeToken makes the opaque page token that resumes after sk.
func encodeToken(sk string) string {
	return base64.RawURLEncoding.EncodeToString(append([]byte{tokenVersion}, sk...))
}

// decodeToken returns the sort key a page token resumes after.
func decodeToken(tok string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errBadToken, err)
	}
	if len(b) < 2 || b[0] != tokenVersion {
		return "", errBadToken
	}
	sk := string(b[1:])
	if len(sk) > maxSKBytes || !utf8.ValidString(sk) {
		return "", errBadToken
	}
	return sk, nil
}
