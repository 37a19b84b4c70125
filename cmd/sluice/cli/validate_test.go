package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-broker/sluice/broker"
)

// TestValidateChannelFlags: validate reads serve's channel flags as serve does and notes
// each object whose backend the flags given do not configure, naming the flag, instead
// of calling it ready silently; with the flag given there is no note; a --channel the
// flags do not configure is serve's error.
func TestValidateChannelFlags(t *testing.T) {
	const manifest = `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: k, namespace: ns, annotations: {sluice.dev/channel: %s}}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: t, namespace: ns}
spec: {broker: k, subscriber: {uri: "http://127.0.0.1:9/"}}
`
	tests := []struct {
		name    string
		backend string // the broker's sluice.dev/channel
		args    []string
		code    int
		note    string // in the Broker's and the Trigger's reason; "" none
		stderr  string
	}{
		{"kafka without --kafka-brokers", "kafka", nil, 0, "readiness depends on --kafka-brokers HOST:PORT[,HOST:PORT], not given", ""},
		{"kafka with --kafka-brokers", "kafka", []string{"--kafka-brokers", "127.0.0.1:1"}, 0, "", ""},
		{"kafka with an empty --kafka-brokers", "kafka", []string{"--kafka-brokers", " , "}, 0, "readiness depends on --kafka-brokers", ""},
		{"jetstream without --data-dir or --nats-url", "jetstream", nil, 0, "readiness depends on --data-dir", ""},
		{"jetstream with --nats-url", "jetstream", []string{"--nats-url", "nats://127.0.0.1:1"}, 0, "", ""},
		{"kinesis without --kinesis-checkpoint-dir", "kinesis", nil, 0, "readiness depends on --kinesis-checkpoint-dir", ""},
		{"memory", "memory", nil, 0, "", ""},
		{"--channel kafka without --kafka-brokers", "memory", []string{"--channel", "kafka"}, 1, "", "--channel kafka needs --kafka-brokers"},
		{"--channel unknown", "memory", []string{"--channel", "disk"}, 1, "", `--channel "disk": unknown channel backend`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(p, []byte(strings.Replace(manifest, "%s", tt.backend, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			code := Execute(context.Background(), append([]string{"validate", "-o", "json", p}, tt.args...), &stdout, &stderr)
			if code != tt.code || !strings.Contains(stderr.String(), tt.stderr) {
				t.Fatalf("exit %d, stderr %q; want %d with %q", code, stderr.String(), tt.code, tt.stderr)
			}
			if code != 0 {
				return
			}
			var rep broker.StatusReport
			if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
				t.Fatalf("%v: %s", err, stdout.String())
			}
			if len(rep.Objects) != 2 {
				t.Fatalf("objects %+v", rep.Objects)
			}
			for _, o := range rep.Objects {
				if tt.note == "" && o.Reason != "" || !strings.Contains(o.Reason, tt.note) {
					t.Errorf("%s: reason %q, want the note %q", o.Key(), o.Reason, tt.note)
				}
			}
		})
	}
}
