package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// MinInternalKeyBytes is the shortest internal key a star accepts.
const MinInternalKeyBytes = 32

// MinAdminTokenBytes is the shortest admin token a star accepts: a
// guessable bootstrap secret would hand out full scope.
const MinAdminTokenBytes = 16

// HeaderInternal carries the cluster's internal credential on
// star-to-star and operator calls (forwards, the settle nudge, drain,
// handoff, dev faults).
const HeaderInternal = "Starlog-Internal-Credential"

// Config is how a star authenticates. Production stars set AdminToken and
// InternalKey; tests and `star dev --open` use Open().
type Config struct {
	// Open disables authentication and authorization: every request acts
	// as the admin and every internal path is callable.
	Open bool
	// AdminToken is the bootstrap token with full scope (never stored).
	AdminToken string
	// InternalKey is the cluster's shared secret (≥ MinInternalKeyBytes):
	// the token-hash key and the internal credential derive from it.
	InternalKey []byte
}

// Open is the configuration of a star without authentication. It is
// never a default: it must be asked for.
func Open() Config { return Config{Open: true} }

// Keys are the secrets a star derives from its configuration.
type Keys struct {
	open      bool
	hashKey   []byte
	adminHash []byte
	internal  string
}

// Derive checks c and derives its keys: the key of token hashes and the
// internal credential are HMAC-SHA256 of the internal key over distinct
// labels, so neither reveals the key or the other.
func Derive(c Config) (Keys, error) {
	if c.Open {
		return Keys{open: true}, nil
	}
	if len(c.InternalKey) < MinInternalKeyBytes {
		return Keys{}, fmt.Errorf("auth: the internal key must be at least %d bytes, got %d", MinInternalKeyBytes, len(c.InternalKey))
	}
	if len(c.AdminToken) < MinAdminTokenBytes {
		return Keys{}, fmt.Errorf("auth: the admin token must be at least %d bytes, got %d", MinAdminTokenBytes, len(c.AdminToken))
	}
	k := Keys{hashKey: mac(c.InternalKey, "starlog/token-hash/v1")}
	k.internal = hex.EncodeToString(mac(c.InternalKey, "starlog/internal-credential/v1"))
	k.adminHash = k.Hash(c.AdminToken)
	return k, nil
}

// InternalCredential derives the value of HeaderInternal from the
// internal key, for operator tools that call admin paths.
func InternalCredential(internalKey []byte) (string, error) {
	if len(internalKey) < MinInternalKeyBytes {
		return "", fmt.Errorf("auth: the internal key must be at least %d bytes, got %d", MinInternalKeyBytes, len(internalKey))
	}
	return hex.EncodeToString(mac(internalKey, "starlog/internal-credential/v1")), nil
}

func mac(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}

// IsOpen reports whether authentication is off.
func (k Keys) IsOpen() bool { return k.open }

// Hash is the keyed hash a token is stored and compared as.
func (k Keys) Hash(token string) []byte { return mac(k.hashKey, token) }

// IsAdmin reports whether token is the admin token, in constant time.
func (k Keys) IsAdmin(token string) bool {
	return !k.open && subtle.ConstantTimeCompare(k.Hash(token), k.adminHash) == 1
}

// Internal is the internal credential to send to peers ("" when open).
func (k Keys) Internal() string { return k.internal }

// IsInternal reports whether v is the internal credential, in constant
// time; an open star takes any value.
func (k Keys) IsInternal(v string) bool {
	if k.open {
		return true
	}
	return v != "" && subtle.ConstantTimeCompare([]byte(v), []byte(k.internal)) == 1
}

// tokenPrefix starts every token a star issues; the id travels in the
// token so a check is one metastore read.
const tokenPrefix = "stl1."

// secretBytes is the random part of a token.
const secretBytes = 32

// NewToken returns a fresh token for id: "stl1.<id, base64url>.<32
// random bytes, base64url>".
func NewToken(id string) (string, error) {
	b := make([]byte, secretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("auth: random token: %w", err)
	}
	enc := base64.RawURLEncoding
	return tokenPrefix + enc.EncodeToString([]byte(id)) + "." + enc.EncodeToString(b), nil
}

// ErrMalformed reports a token that no star could have issued.
var ErrMalformed = errors.New("auth: malformed access token")

// ParseToken returns the id a token names, or ErrMalformed. It checks the
// form only; the keyed hash decides whether the token is real.
func ParseToken(tok string) (string, error) {
	rest, ok := strings.CutPrefix(tok, tokenPrefix)
	if !ok {
		return "", ErrMalformed
	}
	idPart, secret, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(secret, ".") {
		return "", ErrMalformed
	}
	enc := base64.RawURLEncoding
	id, err := enc.DecodeString(idPart)
	if err != nil || ValidateTokenID(string(id)) != nil {
		return "", ErrMalformed
	}
	if s, err := enc.DecodeString(secret); err != nil || len(s) != secretBytes {
		return "", ErrMalformed
	}
	return string(id), nil
}

// Bearer returns the token of an Authorization header value ("Bearer
// <token>", the scheme case-insensitive), or "" when there is none.
func Bearer(h string) string {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}
