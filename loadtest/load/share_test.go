package load

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/loadtest/cevent"
	"github.com/sluice-broker/sluice/loadtest/pacer"
)

func TestShareOf(t *testing.T) {
	tests := []struct {
		hits      uint64
		index, of int
		want      uint64
	}{
		{10, 0, 1, 10},
		{10, 0, 0, 10},
		{10, 0, 3, 4}, // 0 3 6 9
		{10, 1, 3, 3}, // 1 4 7
		{10, 2, 3, 3}, // 2 5 8
		{2, 2, 3, 0},
		{3, 2, 3, 1},
		{0, 0, 3, 0},
	}
	for _, tt := range tests {
		if got := shareOf(tt.hits, tt.index, tt.of); got != tt.want {
			t.Errorf("shareOf(%d, %d, %d) = %d, want %d", tt.hits, tt.index, tt.of, got, tt.want)
		}
	}
}

// A share sends its hits only, with their global sequence numbers, from StartAt.
func TestRunShareAndStartAt(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	tests := []struct {
		name      string
		startAt   time.Duration // from now
		keepStart bool
	}{
		{"start ahead", 300 * time.Millisecond, true},
		{"start slightly late", -100 * time.Millisecond, true},
		{"start far too late", -time.Hour, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at := time.Now().Add(tt.startAt)
			res, err := Run(context.Background(), Options{
				Target: srv.URL, Template: template(t, cevent.Binary), Connections: 4, TrackAccepted: true,
				Pacer: pacer.Constant{Rate: 100, Duration: 500 * time.Millisecond}, ShareIndex: 1, ShareOf: 3, StartAt: at,
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Start.Equal(at) != tt.keepStart {
				t.Errorf("start %v, StartAt %v: kept %v, want %v", res.Start, at, res.Start.Equal(at), tt.keepStart)
			}
			// hits 1, 4, …, 49 of 50; batch size 1 in binary mode, so seq = hit
			if res.Requests != 17 || res.Accepted.Len() != 17 || !res.Accepted.Has(1) || !res.Accepted.Has(49) || res.Accepted.Has(0) {
				t.Errorf("requests %d accepted %d, want 17 (hits 1, 4, …, 49)", res.Requests, res.Accepted.Len())
			}
		})
	}
}
