package kafka

import "testing"

// FuzzDecodeState feeds arbitrary records of the state topic (any client that reaches
// it may write one) to the decoder the watch uses: it never panics, and what it accepts
// names a trigger within the bound.
func FuzzDecodeState(f *testing.F) {
	f.Add([]byte("ns/t"), []byte(`{"paused":true}`))
	f.Add([]byte(""), []byte(`{"paused":true}`))
	f.Add([]byte("ns/t"), []byte(`{"paused":"yes"}`))
	f.Add([]byte("ns/t"), []byte(nil))
	f.Fuzz(func(t *testing.T, key, value []byte) {
		c, err := decodeState(key, value)
		if err != nil {
			return
		}
		if c.Trigger == "" || len(key)+len(value) > stateMaxValue {
			t.Fatalf("accepted %q=%q as %+v", key, value, c)
		}
	})
}
