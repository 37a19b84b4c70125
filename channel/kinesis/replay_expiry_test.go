package kinesis_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/channel/kinesis"
	"github.com/sluice-broker/sluice/channel/kinesis/kinesistest"
	"github.com/sluice-broker/sluice/event"
)

// expirer passes requests to the Kinesis-compatible server, except the GetRecords calls
// expire says to answer as Kinesis does for an iterator older than 5 minutes.
type expirer struct {
	expire func(n int64) bool // n counts GetRecords calls from 1
	calls  atomic.Int64
}

func (e *expirer) Do(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".GetRecords") && e.expire(e.calls.Add(1)) {
		body := `{"__type":"ExpiredIteratorException","message":"Iterator expired"}`
		return &http.Response{StatusCode: http.StatusBadRequest, Status: "400 Bad Request", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {"application/x-amz-json-1.1"}},
			Body:   io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: r}, nil
	}
	return http.DefaultClient.Do(r)
}

// TestReplayIteratorExpires: a replay whose shard iterator expired between two pages
// (held longer than an iterator lives) goes on after the last record it read, every
// event once; an iterator that expires again at once ends the replay with an error
// saying so.
func TestReplayIteratorExpires(t *testing.T) {
	tests := []struct {
		name    string
		expire  func(n int64) bool
		wantErr string
	}{
		{"after the first page", func(n int64) bool { return n == 2 }, ""},
		{"again at once", func(n int64) bool { return n >= 2 }, "expired at once"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &expirer{expire: tt.expire}
			api := awskinesis.New(awskinesis.Options{Region: "us-east-1", BaseEndpoint: aws.String(kinesistest.Endpoint(t)),
				Credentials: credentials.NewStaticCredentialsProvider("sluice", "sluice", ""), HTTPClient: e})
			c := newChannel(t, uniqueKey(t), t.TempDir(), kinesis.WithShards(1), kinesis.WithAPI(api))
			defer c.Close()
			ctx := channeltest.Ctx(t, 60*time.Second)
			from := time.Now().Add(-2 * time.Second)
			for i := range 3 {
				channeltest.Publish(t, c, []string{"a"}, &event.Event{SpecVersion: "1.0", ID: fmt.Sprintf("e%d", i), Source: "/s", Type: "t"})
			}
			to := time.Now().Add(2 * time.Second)
			var ids []string
			var err error
			for st, rerr := range c.Replay(ctx, from, to) {
				if rerr != nil {
					err = rerr
					break
				}
				ids = append(ids, st.Event.ID)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("replay ended with %v, want an error saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("after %v: %v", ids, err)
			}
			if got := strings.Join(ids, ","); got != "e0,e1,e2" {
				t.Fatalf("replayed %s, want e0,e1,e2", got)
			}
			if e.calls.Load() < 2 {
				t.Fatalf("%d GetRecords calls: the iterator never expired", e.calls.Load())
			}
		})
	}
}
