package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/sluice-broker/sluice/internal/bytesize"
)

// TestDLQFlagBounds: a --rate or --limit out of range is refused, naming the flag and its
// bound, before any request (the address answers nothing).
func TestDLQFlagBounds(t *testing.T) {
	base := []string{"--addr", "127.0.0.1:1", "--trigger", "ns/t"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "redrive", "--rate", "0"}, "--rate 0: want 1 to 1000"},
		{[]string{"dlq", "redrive", "--rate", "-5"}, "--rate -5: want 1 to 1000"},
		{[]string{"dlq", "redrive", "--rate", "1001"}, "--rate 1001: want 1 to 1000"},
		{[]string{"dlq", "list", "--limit", "-1"}, "--limit -1: want 1 to 1000"},
		{[]string{"dlq", "list", "--limit", "0"}, "--limit 0: want 1 to 1000"},
		{[]string{"dlq", "list", "--limit", "1001"}, "--limit 1001: want 1 to 1000"},
	} {
		var out, errOut bytes.Buffer
		code := Execute(context.Background(), append(tc.args, base...), &out, &errOut)
		if code == 0 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, %q; want an error saying %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}

// TestDLQHelpNamesTheToken: the help says every subcommand needs --ops-token-file.
func TestDLQHelpNamesTheToken(t *testing.T) {
	var out, errOut bytes.Buffer
	Execute(context.Background(), []string{"dlq", "--help"}, &out, &errOut)
	if want := "list, redrive and purge need the server's\n--ops-token-file"; !strings.Contains(out.String(), want) {
		t.Errorf("sluice dlq --help:\n%s\nwant it to say %q", out.String(), want)
	}
}

// TestDLQMemoryTotalFlag: --dlq-memory-limit, or a quarter of --memory-limit.
func TestDLQMemoryTotalFlag(t *testing.T) {
	for _, tc := range []struct {
		flag        int64
		memoryLimit int64
		want        int64
	}{
		{0, 64 << 20, 16 << 20},
		{0, 3, 1},
		{5 << 20, 64 << 20, 5 << 20},
	} {
		f := dlqFlags{memory: bytesize.Size(tc.flag)}
		if got := f.memoryTotal(tc.memoryLimit); got != tc.want {
			t.Errorf("--dlq-memory-limit %d, --memory-limit %d: %d; want %d", tc.flag, tc.memoryLimit, got, tc.want)
		}
	}
}
