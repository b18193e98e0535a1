package servecmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/aws/smithy-go/middleware"
	"github.com/spf13/pflag"

	"github.com/starlog/starlog/shared/awssecret"
	"github.com/starlog/starlog/star/auth"
)

// Environment variables that hold a secret itself (not a file naming it).
// They are not flags: a secret on the command line shows in ps.
const (
	EnvAdminToken  = "STARLOG_ADMIN_TOKEN"
	EnvInternalKey = "STARLOG_INTERNAL_KEY"
)

// secretSource is one place a secret may come from. Load reports ok=false
// when the source is not configured (its flag or variable unset), so the
// next source is tried.
type secretSource struct {
	// Name says where it is, for errors: "--admin-token-file (STARLOG_ADMIN_TOKEN_FILE)".
	Name string
	Load func(ctx context.Context) (value []byte, ok bool, err error)
}

// secret is one credential `star serve` needs and the sources it may
// come from, in order of preference. Another source (a Secrets Manager
// secret) is one more entry of Sources, added where the flags are.
type secret struct {
	What    string
	Sources []secretSource
}

// resolve loads the secret from the first configured source; with none
// configured the error names every source.
func (s secret) resolve(ctx context.Context) ([]byte, error) {
	names := make([]string, 0, len(s.Sources))
	for _, src := range s.Sources {
		v, ok, err := src.Load(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s from %s: %w", s.What, src.Name, err)
		}
		if ok {
			return v, nil
		}
		names = append(names, src.Name)
	}
	return nil, fmt.Errorf("%s: set one of %s", s.What, strings.Join(names, ", "))
}

// fileSource reads a secret from the file a flag (or its variable) names;
// surrounding whitespace (a trailing newline) is not part of it.
func fileSource(flag string, path *string) secretSource {
	return secretSource{Name: flagRef(flag), Load: func(context.Context) ([]byte, bool, error) {
		if *path == "" {
			return nil, false, nil
		}
		b, err := os.ReadFile(*path)
		if err != nil {
			return nil, false, err
		}
		v := []byte(strings.TrimSpace(string(b)))
		if len(v) == 0 {
			return nil, false, fmt.Errorf("%s is empty", *path)
		}
		return v, true, nil
	}}
}

// secretsManagerSource reads a secret from the AWS Secrets Manager secret
// (an ARN, as the stack passes, or a name) a flag (or its variable) names.
func secretsManagerSource(flag string, id *string, apiOptions *[]func(*middleware.Stack) error) secretSource {
	return secretSource{Name: flagRef(flag), Load: func(ctx context.Context) ([]byte, bool, error) {
		if *id == "" {
			return nil, false, nil
		}
		v, err := awssecret.Fetch(ctx, *id, *apiOptions...)
		if err != nil {
			return nil, false, err
		}
		v = strings.TrimSpace(v)
		if v == "" {
			return nil, false, fmt.Errorf("secret %s is empty", *id)
		}
		return []byte(v), true, nil
	}}
}

// envSource reads a secret from an environment variable.
func envSource(name string) secretSource {
	return secretSource{Name: name, Load: func(context.Context) ([]byte, bool, error) {
		v, ok := os.LookupEnv(name)
		if !ok || v == "" {
			return nil, false, nil
		}
		return []byte(strings.TrimSpace(v)), true, nil
	}}
}

// credentials are the sources of the admin token and the internal key.
type credentials struct {
	adminTokenFile, internalKeyFile     string
	adminTokenSecret, internalKeySecret string
	// apiOptions go to the Secrets Manager client (the rehearsal's
	// operation recorder).
	apiOptions      []func(*middleware.Stack) error
	admin, internal secret
}

// register adds the credential flags to fs and sets up the sources.
func (c *credentials) register(fs *pflag.FlagSet) {
	fs.StringVar(&c.adminTokenFile, "admin-token-file", "", "file holding the admin access token (full scope; issues the first tokens); or set "+EnvAdminToken+" to the token")
	fs.StringVar(&c.internalKeyFile, "internal-key-file", "", fmt.Sprintf("file holding the cluster's internal key (≥ %d bytes, shared by every star: token hashes and the internal credential derive from it); or set %s to the key", auth.MinInternalKeyBytes, EnvInternalKey))
	fs.StringVar(&c.adminTokenSecret, "admin-token-secret", "", "AWS Secrets Manager secret (ARN or name) holding the admin access token (the stack's AdminToken)")
	fs.StringVar(&c.internalKeySecret, "internal-key-secret", "", "AWS Secrets Manager secret (ARN or name) holding the internal key (the stack's InternalKey)")
	c.admin = secret{What: "admin token", Sources: []secretSource{fileSource("admin-token-file", &c.adminTokenFile), secretsManagerSource("admin-token-secret", &c.adminTokenSecret, &c.apiOptions), envSource(EnvAdminToken)}}
	c.internal = secret{What: "internal key", Sources: []secretSource{fileSource("internal-key-file", &c.internalKeyFile), secretsManagerSource("internal-key-secret", &c.internalKeySecret, &c.apiOptions), envSource(EnvInternalKey)}}
}

// load resolves both secrets into the server's auth configuration,
// reporting every missing one.
func (c *credentials) load(ctx context.Context) (auth.Config, error) {
	admin, aerr := c.admin.resolve(ctx)
	key, kerr := c.internal.resolve(ctx)
	if err := errors.Join(aerr, kerr); err != nil {
		return auth.Config{}, fmt.Errorf("star serve: missing credentials:\n%w", err)
	}
	cfg := auth.Config{AdminToken: string(admin), InternalKey: key}
	if _, err := auth.Derive(cfg); err != nil {
		return auth.Config{}, fmt.Errorf("star serve: %w", err)
	}
	return cfg, nil
}
