package failover

import "github.com/starlog/starlog/star/auth"

// The credentials of the benchmark's stars (through their environment):
// its clients send the admin token, its fault calls the internal
// credential derived from the key.
const (
	adminToken  = "failover-admin-token-0123456789"
	internalKey = "failover-internal-key-0123456789abcdef"
)

func credentialEnv() []string {
	return []string{"STARLOG_ADMIN_TOKEN=" + adminToken, "STARLOG_INTERNAL_KEY=" + internalKey}
}

func internalCredential() string {
	c, err := auth.InternalCredential([]byte(internalKey))
	if err != nil {
		panic(err) // internalKey is a constant of the right length
	}
	return c
}
