// Package rabbitmqtest gives tests the URL of the real RabbitMQ node that
// scripts/rabbitmq.sh runs.
package rabbitmqtest

import (
	"os"
	"strings"
	"testing"
)

// EnvURL is the environment variable holding the node's AMQP URL.
const EnvURL = "SLUICE_RABBITMQ_URL"

// URL returns the AMQP URL from SLUICE_RABBITMQ_URL. When it is unset the test fails
// under CI (CI=true) and is skipped otherwise, saying how to start RabbitMQ.
func URL(tb testing.TB) string {
	tb.Helper()
	v := strings.TrimSpace(os.Getenv(EnvURL))
	if v == "" {
		const how = "run scripts/rabbitmq.sh start and export " + EnvURL
		if os.Getenv("CI") == "true" {
			tb.Fatal("RabbitMQ is required under CI: " + how)
		}
		tb.Skip("RabbitMQ not available (" + EnvURL + " unset): " + how)
	}
	return v
}
