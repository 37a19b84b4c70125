package slo

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    []Objective
		wantErr bool
	}{
		{in: "", want: nil},
		{in: "p99<50ms", want: []Objective{{Text: "p99<50ms", Key: "p99", Op: "<", Value: float64(50 * time.Millisecond)}}},
		{in: "e2e.p99.9 <= 1.5s", want: []Objective{{Text: "e2e.p99.9<=1.5s", Key: "e2e.p99.9", Op: "<=", Value: float64(1500 * time.Millisecond)}}},
		{in: "p50<2", want: []Objective{{Text: "p50<2", Key: "p50", Op: "<", Value: float64(2 * time.Millisecond)}}},
		{in: "loss=0,success>=99.9%", want: []Objective{
			{Text: "loss=0", Key: "loss", Op: "=", Value: 0},
			{Text: "success>=99.9%", Key: "success", Op: ">=", Value: 99.9}}},
		{in: "dup==0", want: []Objective{{Text: "dup==0", Key: "dup", Op: "=", Value: 0}}},
		{in: "p98<1ms", wantErr: true},
		{in: "p99", wantErr: true},
		{in: "p99<fast", wantErr: true},
		{in: "success>=lots", wantErr: true},
		{in: "<5", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Parse(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Parse(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if len(got) != len(tt.want) {
				t.Fatalf("Parse(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("Parse(%q)[%d] = %+v, want %+v", tt.in, i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestCheck(t *testing.T) {
	m := Metrics{"p99": float64(40 * time.Millisecond), "success": 99.95, "loss": 0, "dup": 2}
	tests := []struct {
		slo  string
		pass bool
	}{
		{"p99<50ms", true},
		{"p99<40ms", false},
		{"p99<=40ms", true},
		{"success>=99.9", true},
		{"success>99.99", false},
		{"loss=0,success>=99.9,p99<50ms", true},
		{"loss=0,dup=0", false},
		{"dup!=0", true},
		{"e2e.p99<1s", false}, // not measured fails
	}
	for _, tt := range tests {
		t.Run(tt.slo, func(t *testing.T) {
			objs, err := Parse(tt.slo)
			if err != nil {
				t.Fatal(err)
			}
			vs, pass := Check(objs, m)
			if pass != tt.pass {
				t.Errorf("Check(%q) = %v, want %v (%v)", tt.slo, pass, tt.pass, vs)
			}
		})
	}
}
