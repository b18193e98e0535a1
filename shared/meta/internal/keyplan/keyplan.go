// Package keyplan holds what the metastore backends share about keys and
// range queries: the key and item limits both enforce, the reduction of a
// meta.Query to bounds, and the opaque page tokens. A backend keeps one
// Rules value naming itself, so its errors and its tokens stay its own.
package keyplan

import (
	"encoding/base64"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/starlog/starlog/shared/meta"
)

// Key and item limits are DynamoDB's, checked before any call by every
// backend so that they all refuse the same things with the same errors,
// and whatever works on the embedded store also works on DynamoDB.
const (
	MaxPKBytes   = 2048
	MaxSKBytes   = 1024
	MaxItemBytes = 400 * 1024
)

// MaxLimit caps a page's size.
const MaxLimit = 10000

// ErrBadToken reports a page token that is corrupt or another backend's.
var ErrBadToken = errors.New("invalid page token")

// Rules are one backend's parameters.
type Rules struct {
	// Backend prefixes the key and item errors, e.g. "meta/sqlite".
	Backend string
	// TokenTag tags the backend's page tokens so a token from another
	// backend or a corrupted one is rejected instead of misread.
	TokenTag byte
	// DefaultLimit is the page size of a Query without a Limit; it must
	// be positive.
	DefaultLimit int
}

// CheckKey rejects keys DynamoDB would reject.
func (r Rules) CheckKey(pk, sk string) error {
	switch {
	case pk == "" || sk == "":
		return fmt.Errorf("%s: empty key pk=%q sk=%q", r.Backend, pk, sk)
	case len(pk) > MaxPKBytes:
		return fmt.Errorf("%s: pk of %d bytes exceeds %d", r.Backend, len(pk), MaxPKBytes)
	case len(sk) > MaxSKBytes:
		return fmt.Errorf("%s: sk of %d bytes exceeds %d", r.Backend, len(sk), MaxSKBytes)
	case !utf8.ValidString(pk) || !utf8.ValidString(sk):
		return fmt.Errorf("%s: key pk=%q sk=%q is not valid UTF-8", r.Backend, pk, sk)
	}
	return nil
}

// CheckItem also bounds the item's size the way DynamoDB counts it:
// attribute names plus values (ver counted at its widest).
func (r Rules) CheckItem(pk, sk string, val []byte) error {
	if err := r.CheckKey(pk, sk); err != nil {
		return err
	}
	size := len("pk") + len(pk) + len("sk") + len(sk) + len("ver") + 21 + len("val") + len(val)
	if size > MaxItemBytes {
		return fmt.Errorf("%s: item pk=%s sk=%s of %d bytes exceeds %d", r.Backend, pk, sk, size, MaxItemBytes)
	}
	return nil
}

// Plan is a Query reduced to bounds: From ≤ sk ≤ To (empty: open), and
// After, the exclusive resume point in the query's direction.
type Plan struct {
	From, To string
	After    string
	Limit    int
	Empty    bool // the range holds nothing: answer without asking
}

// PlanQuery validates q and reduces it to a Plan. Its errors do not name
// the backend; the caller wraps them.
func (r Rules) PlanQuery(q meta.Query) (Plan, error) {
	if q.PK == "" || len(q.PK) > MaxPKBytes || !utf8.ValidString(q.PK) {
		return Plan{}, fmt.Errorf("invalid pk %q", q.PK)
	}
	if len(q.From) > MaxSKBytes || len(q.To) > MaxSKBytes {
		return Plan{}, fmt.Errorf("sk bound longer than %d bytes", MaxSKBytes)
	}
	if q.Limit < 0 {
		return Plan{}, fmt.Errorf("negative limit %d", q.Limit)
	}
	p := Plan{From: q.From, To: q.To, Limit: q.Limit}
	if p.Limit == 0 {
		p.Limit = r.DefaultLimit
	}
	// A page may hold fewer items than asked, so capping is within the
	// contract; it keeps one page's memory bounded.
	p.Limit = min(p.Limit, MaxLimit)
	if p.From != "" && p.To != "" && p.From > p.To {
		p.Empty = true
		return p, nil
	}
	if q.PageToken == "" {
		return p, nil
	}
	last, err := r.DecodeToken(q.PageToken)
	if err != nil {
		return Plan{}, err
	}
	// A resume point outside the range either ends the query or does not
	// restrict it; only an inside one becomes the exclusive bound.
	if !q.Backward {
		switch {
		case p.To != "" && last >= p.To:
			p.Empty = true
		case p.From == "" || last >= p.From:
			p.After = last
		}
	} else {
		switch {
		case p.From != "" && last <= p.From:
			p.Empty = true
		case p.To == "" || last <= p.To:
			p.After = last
		}
	}
	return p, nil
}

// EncodeToken makes the opaque page token that resumes after sk.
func (r Rules) EncodeToken(sk string) string {
	return base64.RawURLEncoding.EncodeToString(append([]byte{r.TokenTag}, sk...))
}

// DecodeToken returns the sort key a page token resumes after. Its errors
// wrap ErrBadToken.
func (r Rules) DecodeToken(tok string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadToken, err)
	}
	if len(b) < 2 || b[0] != r.TokenTag {
		return "", ErrBadToken
	}
	sk := string(b[1:])
	if len(sk) > MaxSKBytes || !utf8.ValidString(sk) {
		return "", ErrBadToken
	}
	return sk, nil
}
