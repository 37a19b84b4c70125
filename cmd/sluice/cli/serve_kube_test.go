package cli

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestKubeFlagsCheck(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		config  string
		wantErr string
	}{
		{"off", nil, "", ""},
		{"on", []string{"--kubernetes", "--kubeconfig", "k"}, "", ""},
		{"mapped classes", []string{"--kubernetes", "--kubernetes-classes", "Sluice,MTChannelBasedBroker,Kafka"}, "", ""},
		{"with --config", []string{"--kubernetes"}, "c.yaml", "--kubernetes and --config: give one, not both"},
		{"kubeconfig alone", []string{"--kubeconfig", "k"}, "", "--kubeconfig is for --kubernetes"},
		{"lease alone", []string{"--leader-election-lease-duration", "3s"}, "", "--leader-election-lease-duration is for --kubernetes"},
		{"unknown class", []string{"--kubernetes", "--kubernetes-classes", "RabbitMQBroker"}, "", `--kubernetes-classes: "RabbitMQBroker" is not a broker class Sluice runs`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var k kubeFlags
			fl := pflag.NewFlagSet("serve", pflag.ContinueOnError)
			k.register(fl)
			if err := fl.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := k.check(fl.Changed, tc.config)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}
