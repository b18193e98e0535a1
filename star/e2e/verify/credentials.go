package verify

import "github.com/starlog/starlog/star/auth"

// The credentials of the clusters this package runs: every star gets
// them through its environment (ClusterEnv), the history's clients send
// the admin token, and the nemesis's admin calls (handoff, dev faults)
// send the internal credential derived from the key.
const (
	AdminToken  = "verify-admin-token-0123456789"
	InternalKey = "verify-internal-key-0123456789abcdef"
)

// ClusterEnv is the environment that gives a star the credentials.
func ClusterEnv() []string {
	return []string{"STARLOG_ADMIN_TOKEN=" + AdminToken, "STARLOG_INTERNAL_KEY=" + InternalKey}
}

// internalCredential is the value of auth.HeaderInternal for InternalKey.
func internalCredential() string {
	c, err := auth.InternalCredential([]byte(InternalKey))
	if err != nil {
		panic(err) // InternalKey is a constant of the right length
	}
	return c
}
