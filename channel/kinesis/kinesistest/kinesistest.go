// Package kinesistest gives tests a client of the real Kinesis-compatible server
// (kinesalite) that scripts/kinesis.sh runs.
package kinesistest

import (
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
)

// EnvEndpoint is the environment variable holding the server's URL.
const EnvEndpoint = "SLUICE_KINESIS_ENDPOINT"

// Endpoint returns the server's URL from SLUICE_KINESIS_ENDPOINT. When it is unset the
// test fails under CI (CI=true) and is skipped otherwise, saying how to start the server.
func Endpoint(tb testing.TB) string {
	tb.Helper()
	v := strings.TrimSpace(os.Getenv(EnvEndpoint))
	if v == "" {
		const how = "run scripts/kinesis.sh start and export " + EnvEndpoint
		if os.Getenv("CI") == "true" {
			tb.Fatal("a Kinesis-compatible server is required under CI: " + how)
		}
		tb.Skip("no Kinesis-compatible server (" + EnvEndpoint + " unset): " + how)
	}
	return v
}

// Client returns an AWS SDK Kinesis client of the server at Endpoint, with static
// credentials (the local server accepts any).
func Client(tb testing.TB) *kinesis.Client {
	tb.Helper()
	endpoint := Endpoint(tb)
	return kinesis.New(kinesis.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("sluice", "sluice", ""),
	})
}
