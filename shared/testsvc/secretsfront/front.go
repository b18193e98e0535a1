// Package secretsfront is a small AWS Secrets Manager stand-in for tests:
// it serves GetSecretValue over the service's JSON 1.1 protocol to the
// SDK's own client, checks each request's SigV4 signature against the
// principals it knows, and lets a principal read only the secrets it is
// granted (as an IAM policy with secretsmanager:GetSecretValue on those
// ARNs would). No stand-in in the project's pinned set serves Secrets
// Manager; the star reads its admin token and internal key from it in the
// stack, so the rehearsal runs that path through this front.
package secretsfront

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/testsvc/sigv4"
)

// Secret is one stored secret. ARN is what CloudFormation's Ref gives
// (arn:aws:secretsmanager:<region>:<account>:secret:<name>-<6 chars>).
type Secret struct {
	ARN, Name, Value string
}

// Principal is one set of long-term keys and the secret ARNs it may read.
type Principal struct {
	AccessKey, SecretKey string
	Readable             []string
}

// Config configures a Front.
type Config struct {
	Region     string
	Secrets    []Secret
	Principals []Principal
	// Now is the clock that checks signing times (time.Now if nil).
	Now func() time.Time
}

// Stats count what the front served and refused.
type Stats struct {
	// Reads counts GetSecretValue answers by secret ARN and access key
	// ("<arn> <access key>").
	Reads map[string]int
	// Refused counts refusals by error type.
	Refused map[string]int
}

// Front serves Secrets Manager's GetSecretValue.
type Front struct {
	cfg     Config
	keys    map[string]Principal
	secrets []Secret

	mu    sync.Mutex
	stats Stats
}

// New checks cfg and returns a Front.
func New(cfg Config) (*Front, error) {
	if cfg.Region == "" {
		return nil, fmt.Errorf("secretsfront: no region")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	f := &Front{cfg: cfg, keys: map[string]Principal{}, secrets: cfg.Secrets,
		stats: Stats{Reads: map[string]int{}, Refused: map[string]int{}}}
	for _, p := range cfg.Principals {
		if p.AccessKey == "" || p.SecretKey == "" {
			return nil, fmt.Errorf("secretsfront: a principal without keys")
		}
		f.keys[p.AccessKey] = p
	}
	for _, s := range cfg.Secrets {
		if !strings.HasPrefix(s.ARN, "arn:") || s.Name == "" {
			return nil, fmt.Errorf("secretsfront: secret %+v needs an ARN and a name", s)
		}
	}
	return f, nil
}

// Stats returns a copy of the counters.
func (f *Front) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := Stats{Reads: map[string]int{}, Refused: map[string]int{}}
	for k, v := range f.stats.Reads {
		out.Reads[k] = v
	}
	for k, v := range f.stats.Refused {
		out.Refused[k] = v
	}
	return out
}

// apiError is an error in the JSON protocol's shape. Secrets Manager
// answers 400 for every client error but an unknown access key (403).
type apiError struct {
	status  int
	typ     string
	message string
}

func (e *apiError) write(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-Errortype", e.typ)
	w.WriteHeader(e.status)
	json.NewEncoder(w).Encode(map[string]string{"__type": e.typ, "message": e.message})
}

func clientError(typ, format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, typ, fmt.Sprintf(format, args...)}
}

// maxBody bounds a request body (GetSecretValue's input is a few hundred
// bytes).
const maxBody = 64 << 10

const targetPrefix = "secretsmanager."

// ServeHTTP answers one request.
func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	out, err := f.serve(r)
	if err != nil {
		f.mu.Lock()
		f.stats.Refused[err.typ]++
		f.mu.Unlock()
		err.write(w)
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Write(out)
}

func (f *Front) serve(r *http.Request) ([]byte, *apiError) {
	if r.Method != http.MethodPost || r.URL.Path != "/" {
		return nil, clientError("InvalidAction", "only POST / is served")
	}
	body, rerr := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if rerr != nil || len(body) > maxBody {
		return nil, clientError("InvalidParameterException", "unreadable or oversized body")
	}
	p, aerr := f.authenticate(r, body)
	if aerr != nil {
		return nil, aerr
	}
	op, ok := strings.CutPrefix(r.Header.Get("X-Amz-Target"), targetPrefix)
	if !ok || op != "GetSecretValue" {
		return nil, clientError("UnknownOperationException", "the front serves GetSecretValue only, not %q", r.Header.Get("X-Amz-Target"))
	}
	var in struct {
		SecretID     string `json:"SecretId"`
		VersionID    string `json:"VersionId"`
		VersionStage string `json:"VersionStage"`
	}
	if err := json.Unmarshal(body, &in); err != nil || in.SecretID == "" {
		return nil, clientError("InvalidParameterException", "SecretId is required")
	}
	if in.VersionID != "" || (in.VersionStage != "" && in.VersionStage != "AWSCURRENT") {
		return nil, clientError("ResourceNotFoundException", "Secrets Manager can't find the specified secret value for the version asked")
	}
	s, found := f.lookup(in.SecretID)
	arn := in.SecretID
	if found {
		arn = s.ARN
	}
	// As with IAM, a caller without the grant learns nothing about whether
	// the secret exists.
	if !readable(p, arn) {
		return nil, clientError("AccessDeniedException", "User: %s is not authorized to perform: secretsmanager:GetSecretValue on resource: %s", p.AccessKey, in.SecretID)
	}
	if !found {
		return nil, clientError("ResourceNotFoundException", "Secrets Manager can't find the specified secret.")
	}
	f.mu.Lock()
	f.stats.Reads[s.ARN+" "+p.AccessKey]++
	f.mu.Unlock()
	out, _ := json.Marshal(map[string]any{
		"ARN": s.ARN, "Name": s.Name, "SecretString": s.Value,
		"VersionId": "00000000-0000-4000-8000-000000000001", "VersionStages": []string{"AWSCURRENT"},
		"CreatedDate": float64(f.cfg.Now().Unix()),
	})
	return out, nil
}

// authenticate checks the SigV4 signature (service secretsmanager, this
// front's region; the payload hash is the body's).
func (f *Front) authenticate(r *http.Request, body []byte) (Principal, *apiError) {
	a, err := sigv4.Parse(r)
	if err != nil {
		return Principal{}, sigError(err)
	}
	at, err := sigv4.SigningTime(r, a, f.cfg.Now())
	if err != nil {
		return Principal{}, sigError(err)
	}
	if a.Region != f.cfg.Region || a.Service != "secretsmanager" {
		return Principal{}, clientError("InvalidSignatureException", "credential scope %s/%s; this endpoint is %s/secretsmanager", a.Region, a.Service, f.cfg.Region)
	}
	p, ok := f.keys[a.AccessKey]
	if !ok {
		return Principal{}, &apiError{http.StatusForbidden, "UnrecognizedClientException", "The security token included in the request is invalid."}
	}
	sum := sha256.Sum256(body)
	if err := sigv4.Verify(r.Context(), r, sigv4.RequestPath(r), a, p.SecretKey, hex.EncodeToString(sum[:]), at, sigv4.Options{}); err != nil {
		return Principal{}, sigError(err)
	}
	return p, nil
}

func sigError(e *sigv4.Error) *apiError {
	switch e.Fault {
	case sigv4.Anonymous, sigv4.Presigned:
		return clientError("MissingAuthenticationTokenException", "%s", e.Message)
	case sigv4.Mismatch:
		return clientError("InvalidSignatureException", "%s", e.Message)
	case sigv4.Internal:
		return &apiError{http.StatusInternalServerError, "InternalServiceError", e.Message}
	default:
		return clientError("IncompleteSignature", "%s", e.Message)
	}
}

// lookup finds a secret by ARN or name.
func (f *Front) lookup(id string) (Secret, bool) {
	for _, s := range f.secrets {
		if s.ARN == id || s.Name == id {
			return s, true
		}
	}
	return Secret{}, false
}

func readable(p Principal, arn string) bool {
	for _, a := range p.Readable {
		if a == arn {
			return true
		}
	}
	return false
}
