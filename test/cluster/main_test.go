// Package cluster holds black-box tests of several `sluice serve` replicas sharing one
// engine cluster: a 3-node NATS JetStream cluster (scripts/nats-cluster.sh), a 3-broker
// Kafka cluster (scripts/kafka.sh start-cluster), and a Kinesis-compatible server with a
// DynamoDB-compatible one for the lease table (scripts/kinesis.sh, scripts/dynalite.sh).
// TestMain builds the binary and starts each once for the package, on free 127.0.0.1 ports with files under the
// repository's .cache/, and stops them at the end. A cluster that does not start fails
// its tests under CI=true and skips them elsewhere, saying why.
package cluster

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	// sluiceBin is the binary under test, built once by TestMain.
	sluiceBin string
	// repoRoot is the repository's root directory (the scripts live there).
	repoRoot string
	// natsURLs and kafkaBrokers are the clusters' addresses; empty when a cluster did
	// not start, and then natsErr or kafkaErr says why.
	natsURLs, kafkaBrokers string
	natsErr, kafkaErr      error
	// kinesisURL and dynamoURL are the Kinesis- and DynamoDB-compatible servers' URLs;
	// empty when one did not start, and then kinesisErr says why.
	kinesisURL, dynamoURL string
	kinesisErr            error
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse() // testing.Short below
	root, err := filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	repoRoot = root
	dir, err := os.MkdirTemp("", "sluice-cluster")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	sluiceBin = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", sluiceBin, "../../cmd/sluice")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building sluice:", err)
		return 1
	}
	if testing.Short() {
		return m.Run()
	}
	// A cluster already running (scripts/scaling.sh, a developer's) is used and left
	// running; one started here is stopped at the end.
	if wants("TestJetStreamReplicaKill", "TestJetStreamNodeKill") {
		_, natsUp := script("scripts/nats-cluster.sh", "status")
		natsURLs, natsErr = startCluster("SLUICE_NATS_URLS", "scripts/nats-cluster.sh", "start", "3")
		if natsErr == nil && natsUp != nil {
			defer script("scripts/nats-cluster.sh", "stop")
		}
	}
	if wants("TestKafkaReplicaAndBrokerKill") {
		_, kafkaUp := script("scripts/kafka.sh", "status-cluster")
		kafkaBrokers, kafkaErr = startCluster("SLUICE_KAFKA_CLUSTER_BROKERS", "scripts/kafka.sh", "start-cluster", "3")
		if kafkaErr == nil && kafkaUp != nil {
			defer script("scripts/kafka.sh", "stop-cluster")
		}
	}
	if !wants("TestKinesisReplicaKill") {
		return m.Run()
	}
	_, kinesisUp := script("scripts/kinesis.sh", "status")
	kinesisURL, kinesisErr = startCluster("SLUICE_KINESIS_ENDPOINT", "scripts/kinesis.sh", "start")
	if kinesisErr == nil && kinesisUp != nil {
		defer script("scripts/kinesis.sh", "stop")
	}
	if kinesisErr == nil {
		_, dynamoUp := script("scripts/dynalite.sh", "status")
		dynamoURL, kinesisErr = startCluster("SLUICE_DYNAMODB_ENDPOINT", "scripts/dynalite.sh", "start")
		if kinesisErr == nil && dynamoUp != nil {
			defer script("scripts/dynalite.sh", "stop")
		}
	}
	return m.Run()
}

// wants reports whether one of the tests named will run: clusters take seconds to start
// and are not started for `go test -run SomethingElse`.
func wants(tests ...string) bool {
	for _, a := range os.Args[1:] {
		if v, ok := strings.CutPrefix(a, "-test.run="); ok && v != "" {
			top, _, _ := strings.Cut(v, "/")
			re, err := regexp.Compile(top)
			if err != nil {
				return true
			}
			return slices.ContainsFunc(tests, re.MatchString)
		}
		if strings.HasPrefix(a, "-test.list") {
			return false
		}
	}
	return true
}

// startCluster runs a start script and returns the value of the line VAR=... it prints.
func startCluster(envVar, name string, args ...string) (string, error) {
	start := time.Now()
	out, err := script(name, args...)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, envVar+"="); ok {
			fmt.Fprintf(os.Stderr, "cluster: %s %s ready in %s: %s\n", name, args[0], time.Since(start).Round(100*time.Millisecond), v)
			return v, nil
		}
	}
	return "", fmt.Errorf("%s %s printed no %s line", name, args[0], envVar)
}

// script runs one of the repository's scripts and returns its stdout; its stderr is
// passed on only when it fails.
func script(name string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(repoRoot, name), args...)
	cmd.Dir = repoRoot
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// need returns addr, or skips the test (fails it under CI=true) when the cluster did not
// start.
func need(t *testing.T, what, addr string, err error) string {
	t.Helper()
	if testing.Short() {
		t.Skip("cluster kill test: about 30s of load and recovery")
	}
	if addr != "" {
		return addr
	}
	if err == nil {
		err = fmt.Errorf("not started")
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s required under CI: %v", what, err)
	}
	t.Skipf("%s not available: %v", what, err)
	return ""
}
