package secretsfront_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/smithy-go"

	"github.com/starlog/starlog/shared/testsvc/secretsfront"
)

const (
	region = "us-east-1"
	arnA   = "arn:aws:secretsmanager:us-east-1:123456789012:secret:admin-token-AbCdEf"
	arnB   = "arn:aws:secretsmanager:us-east-1:123456789012:secret:internal-key-GhIjKl"
)

func client(endpoint, ak, sk string) *secretsmanager.Client {
	return secretsmanager.New(secretsmanager.Options{
		Region:       region,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider(ak, sk, ""),
	})
}

// The SDK's own client reads a granted secret by ARN and by name; a
// secret not granted, an unknown key, a wrong secret key and a missing
// secret each get Secrets Manager's error type.
func TestGetSecretValueThroughTheSDK(t *testing.T) {
	f, err := secretsfront.New(secretsfront.Config{
		Region: region,
		Secrets: []secretsfront.Secret{
			{ARN: arnA, Name: "admin-token", Value: "s2-admin-token"},
			{ARN: arnB, Name: "internal-key", Value: "k"},
		},
		Principals: []secretsfront.Principal{{AccessKey: "star", SecretKey: "starsecret", Readable: []string{arnA, arnA + "-gone"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(f)
	defer srv.Close()
	ctx := context.Background()
	c := client(srv.URL, "star", "starsecret")
	for _, id := range []string{arnA, "admin-token"} {
		out, err := c.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)})
		if err != nil {
			t.Fatalf("GetSecretValue(%s): %v", id, err)
		}
		if aws.ToString(out.SecretString) != "s2-admin-token" || aws.ToString(out.ARN) != arnA {
			t.Fatalf("GetSecretValue(%s) = %+v", id, out)
		}
	}
	cases := []struct {
		name string
		c    *secretsmanager.Client
		id   string
		want string
	}{
		{"not granted", c, arnB, "AccessDeniedException"},
		{"granted, missing", c, arnA + "-gone", "ResourceNotFoundException"},
		{"not granted, missing", c, "nothing", "AccessDeniedException"},
		{"unknown key", client(srv.URL, "nobody", "x"), arnA, "UnrecognizedClientException"},
		{"wrong secret key", client(srv.URL, "star", "wrong"), arnA, "InvalidSignatureException"},
	}
	for _, tc := range cases {
		_, err := tc.c.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(tc.id)})
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
	st := f.Stats()
	if st.Reads[arnA+" star"] != 2 || st.Refused["AccessDeniedException"] != 2 {
		t.Errorf("stats %+v", st)
	}
}
