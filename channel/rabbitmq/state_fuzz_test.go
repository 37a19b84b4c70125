package rabbitmq

import "testing"

// FuzzDecodeState feeds arbitrary messages of the state stream (any client that reaches
// it may write one) to the decoder the watch uses: it never panics, and what it accepts
// is within the bound and names either a trigger or a sync marker.
func FuzzDecodeState(f *testing.F) {
	f.Add([]byte(`{"trigger":"ns/t","flags":{"paused":true}}`))
	f.Add([]byte(`{"sync":"00ff"}`))
	f.Add([]byte(`{"trigger":"ns/t","sync":"00ff"}`))
	f.Add([]byte(`{"trigger":"ns/t","flags":{"paused":"yes"}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(nil))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := decodeState(body)
		if err != nil {
			return
		}
		if len(body) > stateMaxRecord || (r.Trigger == "") == (r.Sync == "") {
			t.Fatalf("accepted %q as %+v", body, r)
		}
	})
}
