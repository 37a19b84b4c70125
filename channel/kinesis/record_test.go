package kinesis

import (
	"errors"
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/sluice-broker/sluice/event"
)

func TestFrameRoundTrip(t *testing.T) {
	e := &event.Event{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t", Subject: "Grüße",
		Extensions: []event.Extension{{Name: "partitionkey", Value: "k"}}, Data: []byte{0, 1, 2, 255}}
	for _, routes := range [][]string{{"a"}, {"ns/a", "ns/b", "ns/t/dead-letter"}} {
		got, gotRoutes, err := decodeFrame(appendFrame(nil, e, routes))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, e) || !reflect.DeepEqual(gotRoutes, routes) {
			t.Fatalf("got %+v %v, want %+v %v", got, gotRoutes, e, routes)
		}
	}
}

func TestFrameRejectsWhatIsNotOne(t *testing.T) {
	good := appendFrame(nil, &event.Event{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t"}, []string{"a"})
	for name, b := range map[string][]byte{
		"empty":       nil,
		"json":        []byte(`{"specversion":"1.0"}`),
		"bad version": append([]byte{frameMagic, 9}, good[2:]...),
		"cut route":   good[:4],
		"huge count":  {frameMagic, frameVersion, 0xff, 0xff, 0xff, 0xff, 0x0f},
	} {
		if _, _, err := decodeFrame(b); !errors.Is(err, errFrame) && err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

// FuzzDecodeFrame: no input makes the decoder panic, and what it accepts re-encodes to
// the same frame.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(appendFrame(nil, &event.Event{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t", Data: []byte("x")}, []string{"a", "b"}))
	f.Add([]byte{frameMagic, frameVersion, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, routes, err := decodeFrame(b)
		if err != nil {
			return
		}
		again, routes2, err := decodeFrame(appendFrame(nil, e, routes))
		if err != nil || !reflect.DeepEqual(routes, routes2) || again.ID != e.ID {
			t.Fatalf("re-encoding changed the frame: %v", err)
		}
	})
}

func TestThrottlingIsRecognised(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{&types.ProvisionedThroughputExceededException{}, true},
		{&types.LimitExceededException{}, true},
		{&types.ResourceNotFoundException{}, false},
		{errors.New("dial tcp: connection refused"), false},
	} {
		if got := isThrottle(tt.err); got != tt.want {
			t.Errorf("isThrottle(%T) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
