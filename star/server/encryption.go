package server

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"strings"

	"github.com/starlog/starlog/shared/api"
)

// Stream encryption, as S2 offers it: a stream created in a basin with a
// stream_cipher keeps that cipher, and every append and read of it must
// carry the key (s2-encryption-key: 32 bytes, base64). A star encrypts
// each record with the request's key before it goes to the node, so no
// object or row holds it in the clear, and decrypts on read with the
// read's key; the key is never stored. A record that does not open with
// the key is 400 decryption_failed; a missing or malformed key 400
// bad_header. Command records (trim, fence) stay plain: the star acts on
// them.
//
// An encrypted record is stored with no headers and the body
// encVersion ‖ nonce (12) ‖ AES-256-GCM(envelope), the envelope being the
// headers (uvarint count, then each name and value uvarint-length
// prefixed) and the body; the additional data binds it to its basin and
// stream. Timestamps stay plain (the star orders by them). The metered
// size the star counts (limits, metrics) is the stored one: 29 bytes more
// than the plaintext's, plus the envelope's varint lengths, less the 2
// bytes per header S2 meters.

const (
	encVersion = 1
	keyLen     = 32
)

// spec is a resolved encryption: nil for a plain stream.
type spec struct {
	aead cipher.AEAD
	aad  []byte
}

// resolveSpec combines a stream's cipher with the request's key.
func resolveSpec(r *http.Request, streamCipher, basin, stream string) (*spec, *api.Error) {
	if streamCipher == "" {
		return nil, nil // a plain stream ignores a key, as S2
	}
	v := strings.TrimSpace(r.Header.Get(api.HeaderEncryptionKey))
	if v == "" {
		return nil, api.BadHeader("missing encryption key for stream cipher '%s'", streamCipher)
	}
	key, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return nil, api.BadHeader("invalid encryption key for stream cipher '%s': invalid base64", streamCipher)
	}
	if len(key) != keyLen {
		return nil, api.BadHeader("invalid encryption key length for stream cipher '%s': %d", streamCipher, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, api.BadHeader("invalid encryption key: %v", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, api.Other("aes-gcm: %v", err)
	}
	return &spec{aead: aead, aad: []byte(basin + "/" + stream)}, nil
}

// isCommand reports whether a record is a command record (one header with
// an empty name).
func isCommand(rec *api.Record) bool {
	return len(rec.Headers) == 1 && len(rec.Headers[0].Name) == 0
}

// refuseProducer refuses a producer-marked batch on an encrypted stream:
// encrypt seals the headers, so the sequencer would never see the mark
// and the batch would go in without deduplication (docs/api.md,
// "Idempotent producers").
func (sp *spec) refuseProducer(in *api.AppendInput) *api.Error {
	if sp == nil || len(in.Records) == 0 {
		return nil
	}
	for _, h := range in.Records[0].Headers {
		switch string(h.Name) {
		case api.HeaderProducer, api.HeaderProducerEpoch, api.HeaderProducerSeq:
			return api.Invalid("idempotent producers are not available on encrypted streams: the record headers that mark a batch are sealed with it")
		}
	}
	return nil
}

// encrypt seals every non-command record of in in place.
func (sp *spec) encrypt(in *api.AppendInput) {
	if sp == nil {
		return
	}
	for i := range in.Records {
		rec := &in.Records[i]
		if isCommand(rec) {
			continue
		}
		env := binary.AppendUvarint(nil, uint64(len(rec.Headers)))
		for _, h := range rec.Headers {
			env = binary.AppendUvarint(env, uint64(len(h.Name)))
			env = append(env, h.Name...)
			env = binary.AppendUvarint(env, uint64(len(h.Value)))
			env = append(env, h.Value...)
		}
		env = append(env, rec.Body...)
		out := make([]byte, 1+sp.aead.NonceSize(), 1+sp.aead.NonceSize()+len(env)+sp.aead.Overhead())
		out[0] = encVersion
		if _, err := rand.Read(out[1:]); err != nil {
			panic("server: crypto/rand: " + err.Error())
		}
		rec.Headers, rec.Body = nil, sp.aead.Seal(out, out[1:], env, sp.aad)
	}
}

// decrypt opens every non-command record of b in place.
func (sp *spec) decrypt(b *api.ReadBatch) *api.Error {
	if sp == nil {
		return nil
	}
	ns := sp.aead.NonceSize()
	for i := range b.Records {
		rec := &b.Records[i]
		if isCommand(rec) {
			continue
		}
		if len(rec.Headers) != 0 || len(rec.Body) < 1+ns || rec.Body[0] != encVersion {
			return api.Storage("record %d of an encrypted stream is not an encrypted record", rec.SeqNum)
		}
		env, err := sp.aead.Open(nil, rec.Body[1:1+ns], rec.Body[1+ns:], sp.aad)
		if err != nil {
			return api.DecryptionFailed("record %d does not decrypt with the given key", rec.SeqNum)
		}
		hs, body, ok := parseEnvelope(env)
		if !ok {
			return api.Storage("record %d: malformed decrypted record", rec.SeqNum)
		}
		rec.Headers, rec.Body = hs, body
	}
	return nil
}

func parseEnvelope(env []byte) ([]api.Header, []byte, bool) {
	n, k := binary.Uvarint(env)
	if k <= 0 || n > uint64(len(env)) {
		return nil, nil, false
	}
	env = env[k:]
	var hs []api.Header
	field := func() ([]byte, bool) {
		l, k := binary.Uvarint(env)
		if k <= 0 || l > uint64(len(env)-k) {
			return nil, false
		}
		v := env[k : k+int(l)]
		env = env[k+int(l):]
		return v, true
	}
	for range n {
		name, ok := field()
		if !ok {
			return nil, nil, false
		}
		value, ok := field()
		if !ok {
			return nil, nil, false
		}
		hs = append(hs, api.Header{Name: name, Value: value})
	}
	return hs, env, true
}

// streamSpec looks up the stream's cipher and resolves the request's key
// against it; the error is answered as is.
func (s *Server) streamSpec(r *http.Request, basin, name string) (*spec, error) {
	c, err := s.n.StreamCipher(r.Context(), basin, name)
	if err != nil {
		return nil, err
	}
	sp, aerr := resolveSpec(r, c, basin, name)
	if aerr != nil {
		return nil, aerr
	}
	return sp, nil
}
