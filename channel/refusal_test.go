package channel_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-broker/sluice/channel"
)

func TestReason(t *testing.T) {
	cause := errors.New("dial tcp 10.1.2.3:9092: connection refused")
	refusal := channel.Refuse(channel.ErrUnavailable, "Kafka did not store the events", cause)
	tests := []struct {
		name   string
		err    error
		reason string
		kind   error
	}{
		{"a refusal", refusal, "Kafka did not store the events", channel.ErrUnavailable},
		{"a refusal, wrapped", fmt.Errorf("kafka: publish to broker %q: %w", "ns/b", refusal), "Kafka did not store the events", channel.ErrUnavailable},
		{"a full refusal without a cause", channel.Refuse(channel.ErrFull, "10 bytes queued of 10", nil), "10 bytes queued of 10", channel.ErrFull},
		{"full, no reason", fmt.Errorf("%w: %w", channel.ErrFull, cause), "the channel has no room for the events now", channel.ErrFull},
		{"unavailable, no reason", fmt.Errorf("%w: %w", channel.ErrUnavailable, cause), "the channel's store is unavailable", channel.ErrUnavailable},
		{"too large, no reason", fmt.Errorf("%w: %w", channel.ErrTooLarge, cause), "an event is larger than the channel stores", channel.ErrTooLarge},
		{"closed", channel.ErrClosed, "the channel is closed", channel.ErrClosed},
		{"anything else", cause, "the channel could not store the events", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := channel.Reason(tt.err); got != tt.reason {
				t.Errorf("Reason = %q, want %q", got, tt.reason)
			}
			if strings.Contains(channel.Reason(tt.err), "10.1.2.3") {
				t.Errorf("Reason %q tells the cause", channel.Reason(tt.err))
			}
			if tt.kind != nil && !errors.Is(tt.err, tt.kind) {
				t.Errorf("errors.Is(%v, %v) = false", tt.err, tt.kind)
			}
			if got := channel.IsKind(tt.err); got != (tt.kind != nil) {
				t.Errorf("IsKind = %v, want %v", got, tt.kind != nil)
			}
		})
	}
}

// TestRefusalError: the whole error, for the log, has the kind, the reason and the cause,
// and errors.Is and errors.As see the cause through it.
func TestRefusalError(t *testing.T) {
	type hostError struct{ error }
	cause := hostError{errors.New("dial tcp 10.1.2.3:9092")}
	err := channel.Refuse(channel.ErrUnavailable, "Kafka did not store the events", cause)
	if want := "channel backend unavailable: Kafka did not store the events: dial tcp 10.1.2.3:9092"; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
	if !errors.Is(err, cause) || errors.Is(err, channel.ErrFull) {
		t.Errorf("errors.Is: cause %v, ErrFull %v; want true, false", errors.Is(err, cause), errors.Is(err, channel.ErrFull))
	}
	if _, ok := errors.AsType[hostError](err); !ok {
		t.Error("errors.As does not find the cause")
	}
	if got := channel.Refuse(channel.ErrFull, "no room", nil).Error(); got != "channel full: no room" {
		t.Errorf("without a cause: %q", got)
	}
}
