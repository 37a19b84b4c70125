// Package kinesistest gives tests a client of the real Kinesis-compatible server
// (kinesalite) that scripts/kinesis.sh runs, and of the DynamoDB-compatible one (dynalite)
// that scripts/dynalite.sh runs for lease tables.
package kinesistest

import (
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
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

// EnvDynamoDBEndpoint is the environment variable holding the URL of the
// DynamoDB-compatible server (dynalite) that scripts/dynalite.sh runs, for lease tables.
const EnvDynamoDBEndpoint = "SLUICE_DYNAMODB_ENDPOINT"

// DynamoDBEndpoint returns the server's URL from SLUICE_DYNAMODB_ENDPOINT. When it is
// unset the test fails under CI (CI=true) and is skipped otherwise, saying how to start it.
func DynamoDBEndpoint(tb testing.TB) string {
	tb.Helper()
	v := strings.TrimSpace(os.Getenv(EnvDynamoDBEndpoint))
	if v == "" {
		const how = "run scripts/dynalite.sh start and export " + EnvDynamoDBEndpoint
		if os.Getenv("CI") == "true" {
			tb.Fatal("a DynamoDB-compatible server is required under CI: " + how)
		}
		tb.Skip("no DynamoDB-compatible server (" + EnvDynamoDBEndpoint + " unset): " + how)
	}
	return v
}

// DynamoDB returns an AWS SDK DynamoDB client of the server at DynamoDBEndpoint, with
// static credentials (the local server accepts any).
func DynamoDB(tb testing.TB) *dynamodb.Client {
	tb.Helper()
	endpoint := DynamoDBEndpoint(tb)
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("sluice", "sluice", ""),
	})
}
