package cevent

import (
	"encoding/json"
	"testing"
)

func TestAppendBody(t *testing.T) {
	tests := []struct {
		name   string
		mode   Mode
		data   string
		events int
		field  string // where the data lands
	}{
		{"structured json data", Structured, `{"a": 1}`, 1, "data"},
		{"structured binary data", Structured, "not json", 1, "data_base64"},
		{"batch", Batch, `{"a":1}`, 3, "data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tm, err := NewTemplate(tt.mode, DefaultType, DefaultSource, "run1", []byte(tt.data), 3)
			if err != nil {
				t.Fatal(err)
			}
			body := tm.AppendBody(nil, 7, 123456789, true)
			var evs []map[string]any
			if tt.mode == Batch {
				err = json.Unmarshal(body, &evs)
			} else {
				var ev map[string]any
				err = json.Unmarshal(body, &ev)
				evs = append(evs, ev)
			}
			if err != nil || len(evs) != tt.events {
				t.Fatalf("body %s: %v (%d events)", body, err, len(evs))
			}
			for i, ev := range evs {
				seq := []string{"7", "8", "9"}[i]
				if ev["specversion"] != "1.0" || ev["id"] != "run1-"+seq || ev[ExtSeq] != seq || ev[ExtSent] != "123456789" ||
					ev[ExtRun] != "run1" || ev[ExtWarmup] != "1" || ev["type"] != DefaultType || ev[tt.field] == nil {
					t.Errorf("event %d: %v", i, ev)
				}
			}
		})
	}
}
