package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestBatchAnnotations: the batched-delivery annotations reach the Trigger.
func TestBatchAnnotations(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	doc := "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: default}\n---\n" +
		"apiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t, annotations: {sluice.dev/delivery-batch: \"100\", sluice.dev/delivery-batch-wait: PT0.01S}}\n" +
		"spec: {broker: default, subscriber: {uri: \"http://a/\"}}\n"
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, b := range c.Brokers {
		for _, tr := range b.Triggers {
			found = true
			if tr.Batch != 100 || tr.BatchWait != 10*time.Millisecond {
				t.Errorf("Batch %d BatchWait %v, want 100 and 10ms", tr.Batch, tr.BatchWait)
			}
		}
	}
	if !found {
		t.Fatal("no trigger loaded")
	}
}
