package faults

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// natsNode is an external NATS server (natsd) the test can stop and start again on the
// same port and store.
type natsNode struct {
	t     *testing.T
	port  int
	store string
	addr  string // 127.0.0.1:PORT
	p     *proc
}

func startNATS(t *testing.T, port int, store string) *natsNode {
	t.Helper()
	n := &natsNode{t: t, port: port, store: store, addr: fmt.Sprintf("127.0.0.1:%d", port)}
	n.start()
	return n
}

func (n *natsNode) start() {
	n.t.Helper()
	n.p = startProc(n.t, "natsd", natsdBin, "-port", fmt.Sprint(n.port), "-store", n.store)
	n.p.waitLine("natsd: ready", 30*time.Second)
}

func (n *natsNode) stop() { n.p.stop(20 * time.Second) }

// kafkaNode is a single-node Kafka (KRaft) started from the jars scripts/kafka.sh
// resolves into $SLUICE_CACHE/kafka (default .cache/ at the repo root), listening on a
// port of its own and advertising advertisedPort (a proxy in front of it). It can be
// stopped and started again on the same log dir.
type kafkaNode struct {
	t                 *testing.T
	libs, conf, log4j string
	port              int
	p                 *proc
}

// kafkaLibs finds the jars, or skips (fails under CI=true) saying how to get them.
func kafkaLibs(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("SLUICE_CACHE")
	if cache == "" {
		cache = filepath.Join("..", "..", ".cache")
	}
	version := os.Getenv("SLUICE_KAFKA_VERSION")
	if version == "" {
		version = "3.9.1"
	}
	libs, _ := filepath.Abs(filepath.Join(cache, "kafka", "libs-"+version))
	_, errJava := exec.LookPath("java")
	if _, err := os.Stat(filepath.Join(libs, ".complete")); err != nil || errJava != nil {
		msg := fmt.Sprintf("Kafka jars not in %s or no java: run scripts/kafka.sh start once (make test does)", libs)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return libs
}

// startKafka starts a node listening on a free port and advertising advertisedPort, or
// its own port when advertisedPort is 0.
func startKafka(t *testing.T, advertisedPort int) *kafkaNode {
	t.Helper()
	k := &kafkaNode{t: t, libs: kafkaLibs(t), port: freePort(t)}
	if advertisedPort == 0 {
		advertisedPort = k.port
	}
	cport := freePort(t)
	dir := t.TempDir()
	k.conf = filepath.Join(dir, "server.properties")
	props := fmt.Sprintf(`process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:%d
listeners=PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d
advertised.listeners=PLAINTEXT://127.0.0.1:%d
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=%s
num.partitions=1
default.replication.factor=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=4
`, cport, k.port, cport, advertisedPort, filepath.Join(dir, "data"))
	if err := os.WriteFile(k.conf, []byte(props), 0o644); err != nil {
		t.Fatal(err)
	}
	k.log4j = filepath.Join(dir, "log4j.properties")
	if err := os.WriteFile(k.log4j, []byte("log4j.rootLogger=INFO, stdout\nlog4j.appender.stdout=org.apache.log4j.ConsoleAppender\nlog4j.appender.stdout.layout=org.apache.log4j.PatternLayout\nlog4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n\nlog4j.logger.kafka=WARN\nlog4j.logger.org.apache.kafka=WARN\nlog4j.logger.kafka.server.KafkaServer=INFO\nlog4j.logger.kafka.server.KafkaRaftServer=INFO\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	format := exec.Command("java", k.javaArgs("kafka.tools.StorageTool", "format",
		"--cluster-id="+base64.RawURLEncoding.EncodeToString(id), "--config", k.conf)...)
	if out, err := format.CombinedOutput(); err != nil {
		t.Fatalf("formatting Kafka's log dir: %v\n%s", err, out)
	}
	k.start()
	return k
}

func (k *kafkaNode) javaArgs(args ...string) []string {
	return append([]string{"-Xmx512m", "-Xms128m", "-XX:+UseSerialGC", "-Djava.awt.headless=true",
		"-Dlog4j.configuration=file:" + k.log4j, "-cp", k.libs + "/*"}, args...)
}

// addr is where Kafka itself listens (the proxy's upstream).
func (k *kafkaNode) addr() string { return fmt.Sprintf("127.0.0.1:%d", k.port) }

func (k *kafkaNode) start() {
	k.t.Helper()
	k.p = startProc(k.t, "kafka", "java", k.javaArgs("kafka.Kafka", k.conf)...)
	deadline := time.Now().Add(120 * time.Second)
	for time.Now().Before(deadline) {
		if strings.Contains(k.p.logs.String(), "Kafka Server started") {
			if c, err := net.DialTimeout("tcp", k.addr(), time.Second); err == nil {
				c.Close()
				return
			}
		}
		select {
		case <-k.p.exited:
			k.t.Fatalf("Kafka exited during startup\n%s", tail(k.p.logs.String(), 4096))
		case <-time.After(200 * time.Millisecond):
		}
	}
	k.t.Fatalf("Kafka did not start in 120s\n%s", tail(k.p.logs.String(), 4096))
}

func (k *kafkaNode) stop() { k.p.stop(30 * time.Second) }
