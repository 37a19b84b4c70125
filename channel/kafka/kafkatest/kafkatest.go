// Package kafkatest gives tests the address of the real Kafka cluster that
// scripts/kafka.sh runs.
package kafkatest

import (
	"os"
	"strings"
	"testing"
)

// EnvBrokers is the environment variable holding the comma-separated broker addresses.
const EnvBrokers = "SLUICE_KAFKA_BROKERS"

// Brokers returns the seed brokers from SLUICE_KAFKA_BROKERS. When it is unset the test
// fails under CI (CI=true) and is skipped otherwise, saying how to start Kafka.
func Brokers(tb testing.TB) []string {
	tb.Helper()
	v := strings.TrimSpace(os.Getenv(EnvBrokers))
	if v == "" {
		const msg = "Kafka required under CI: run scripts/kafka.sh start and export " + EnvBrokers
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip("Kafka not available (" + EnvBrokers + " unset): run scripts/kafka.sh start and export " + EnvBrokers)
	}
	return strings.Split(v, ",")
}
