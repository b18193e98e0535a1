package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/jsii-runtime-go"
)

// Lengths of the generated secrets (letters and digits: about 5.95 bits
// a character, so 48 characters are 285 bits and 64 are 381).
const (
	AdminTokenLength  = 48
	InternalKeyLength = 64
)

// secrets creates the two secrets every star reads at start
// (docs/security.md): the admin token, the account-wide S2 access token an
// operator uses to issue scoped tokens, and the internal key, from which
// the stars derive the credential of star-to-star and admin calls and the
// key that hashes stored tokens. CloudFormation generates both; nothing
// holds them but Secrets Manager and the stars' memory. They are data:
// replacing the internal key invalidates every issued token, so they are
// retained like the table.
func (s *Starlog) secrets() {
	gen := func(id, desc string, n int) awssecretsmanager.Secret {
		return awssecretsmanager.NewSecret(s.Stack, jsii.String(id), &awssecretsmanager.SecretProps{
			Description: jsii.String(desc),
			GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
				PasswordLength:     jsii.Number(float64(n)),
				ExcludePunctuation: jsii.Bool(true),
				IncludeSpace:       jsii.Bool(false),
			},
			RemovalPolicy: s.removalPolicy(),
		})
	}
	s.AdminToken = gen("AdminToken", "starlog admin access token (full scope): issue scoped tokens with it", AdminTokenLength)
	s.InternalKey = gen("InternalKey", "starlog internal key: star-to-star and admin credential, token hash key", InternalKeyLength)
}

// secretReadStatement lets the star role read both secrets, nothing else.
func (s *Starlog) secretReadStatement() awsiam.PolicyStatement {
	return awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:       jsii.String("StarSecrets"),
		Actions:   strs("secretsmanager:GetSecretValue"),
		Resources: strs(*s.AdminToken.SecretArn(), *s.InternalKey.SecretArn()),
	})
}
