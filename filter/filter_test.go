package filter

import (
	"testing"

	"github.com/sluice-broker/sluice/event"
)

// testEvent is a valid event with a subject and two extensions.
func testEvent() *event.Event {
	return &event.Event{
		SpecVersion: "1.0",
		ID:          "id-1",
		Source:      "https://example.com/orders",
		Type:        "com.example.order.created",
		Subject:     "order/42",
		Time:        "2024-05-01T12:00:00Z",
		Extensions: []event.Extension{
			{Name: "region", Value: "eu-west-1"},
			{Name: "priority", Value: "7"},
			{Name: "flag", Value: "true"},
		},
		Data: []byte(`{"n":1}`),
	}
}

func TestAttributesKnative(t *testing.T) {
	tests := []struct {
		name  string
		attrs map[string]string
		want  bool
	}{
		{"no attributes match all", nil, true},
		{"type equal", map[string]string{"type": "com.example.order.created"}, true},
		{"type different", map[string]string{"type": "com.example.order.deleted"}, false},
		{"type prefix is not equality", map[string]string{"type": "com.example"}, false},
		{"type and source", map[string]string{"type": "com.example.order.created", "source": "https://example.com/orders"}, true},
		{"one of two differs", map[string]string{"type": "com.example.order.created", "source": "x"}, false},
		{"extension equal", map[string]string{"region": "eu-west-1"}, true},
		{"extension differs", map[string]string{"region": "us-east-1"}, false},
		{"extension missing", map[string]string{"tenant": "a"}, false},
		{"empty value on set extension", map[string]string{"region": ""}, true},
		{"empty value on missing extension", map[string]string{"tenant": ""}, false},
		{"empty value on set attribute", map[string]string{"subject": ""}, true},
		{"empty value on unset context attribute", map[string]string{"dataschema": ""}, true},
		{"empty value on legacy knative attribute", map[string]string{"schemaurl": ""}, true},
		{"empty type matches any type", map[string]string{"type": ""}, true},
		{"specversion", map[string]string{"specversion": "1.0"}, true},
		{"time canonical string", map[string]string{"time": "2024-05-01T12:00:00Z"}, true},
		{"unset optional attribute with value", map[string]string{"datacontenttype": "application/json"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Compile(tt.attrs, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Match(testEvent()); got != tt.want {
				t.Errorf("Match = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDialects(t *testing.T) {
	m := func(kv ...string) map[string]string {
		r := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			r[kv[i]] = kv[i+1]
		}
		return r
	}
	tests := []struct {
		name    string
		filters []Spec
		want    bool
	}{
		{"exact type", []Spec{{Exact: m("type", "com.example.order.created")}}, true},
		{"exact type differs", []Spec{{Exact: m("type", "com.example.order")}}, false},
		{"exact two attributes", []Spec{{Exact: m("type", "com.example.order.created", "region", "eu-west-1")}}, true},
		{"exact one of two differs", []Spec{{Exact: m("type", "com.example.order.created", "region", "eu")}}, false},
		{"exact missing extension", []Spec{{Exact: m("tenant", "a")}}, false},
		{"exact missing optional attribute", []Spec{{Exact: m("dataschema", "https://x")}}, false},
		{"prefix type", []Spec{{Prefix: m("type", "com.example.")}}, true},
		{"prefix whole value", []Spec{{Prefix: m("type", "com.example.order.created")}}, true},
		{"prefix differs", []Spec{{Prefix: m("type", "org.")}}, false},
		{"prefix extension", []Spec{{Prefix: m("region", "eu-")}}, true},
		{"prefix missing extension", []Spec{{Prefix: m("tenant", "a")}}, false},
		{"suffix type", []Spec{{Suffix: m("type", ".created")}}, true},
		{"suffix differs", []Spec{{Suffix: m("type", ".deleted")}}, false},
		{"suffix missing subject-like extension", []Spec{{Suffix: m("tenant", "a")}}, false},
		{"suffix subject and source", []Spec{{Suffix: m("subject", "/42", "source", "/orders")}}, true},
		{"all match", []Spec{{All: []Spec{{Prefix: m("type", "com.")}, {Suffix: m("type", "created")}}}}, true},
		{"all one fails", []Spec{{All: []Spec{{Prefix: m("type", "com.")}, {Suffix: m("type", "deleted")}}}}, false},
		{"any one matches", []Spec{{Any: []Spec{{Exact: m("type", "x")}, {Exact: m("region", "eu-west-1")}}}}, true},
		{"any none matches", []Spec{{Any: []Spec{{Exact: m("type", "x")}, {Exact: m("region", "y")}}}}, false},
		{"not of match", []Spec{{Not: &Spec{Exact: m("type", "com.example.order.created")}}}, false},
		{"not of mismatch", []Spec{{Not: &Spec{Exact: m("type", "x")}}}, true},
		{"not of missing attribute", []Spec{{Not: &Spec{Exact: m("tenant", "a")}}}, true},
		{"cesql true", []Spec{{CESQL: "type = 'com.example.order.created' AND region LIKE 'eu-%'"}}, true},
		{"cesql false", []Spec{{CESQL: "type = 'x'"}}, false},
		{"cesql extension cast to integer", []Spec{{CESQL: "priority > 5"}}, true},
		{"cesql string extension compared with a boolean", []Spec{{CESQL: "flag = TRUE"}}, true},
		{"cesql missing attribute is no match", []Spec{{CESQL: "tenant = 'a'"}}, false},
		{"cesql exists", []Spec{{CESQL: "EXISTS region AND NOT EXISTS tenant"}}, true},
		{"cesql non-boolean result is no match", []Spec{{CESQL: "type"}}, false},
		{"cesql integer result is no match", []Spec{{CESQL: "1 + 1"}}, false},
		{"cesql evaluation error is no match", []Spec{{CESQL: "1 / 0 = 1"}}, false},
		{"several filters all must match", []Spec{{Prefix: m("type", "com.")}, {CESQL: "subject = 'order/42'"}}, true},
		{"several filters one fails", []Spec{{Prefix: m("type", "com.")}, {CESQL: "subject = 'x'"}}, false},
		{"deep nesting", []Spec{{Any: []Spec{
			{Not: &Spec{All: []Spec{{Exact: m("type", "com.example.order.created")}, {Suffix: m("region", "-1")}}}},
			{All: []Spec{{Any: []Spec{{Prefix: m("subject", "order/")}, {CESQL: "FALSE"}}}, {Not: &Spec{Exact: m("tenant", "x")}}}},
		}}}, true},
		{"deep nesting no match", []Spec{{All: []Spec{
			{Any: []Spec{{Exact: m("type", "a")}, {Not: &Spec{Prefix: m("type", "com.")}}}},
			{Exact: m("region", "eu-west-1")},
		}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Compile(nil, tt.filters)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Match(testEvent()); got != tt.want {
				t.Errorf("Match = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFiltersTakePrecedenceOverAttributes(t *testing.T) {
	// As in Knative: with spec.filters set, spec.filter is not used.
	f, err := Compile(map[string]string{"type": "other"}, []Spec{{Prefix: map[string]string{"type": "com."}}})
	if err != nil {
		t.Fatal(err)
	}
	if !f.Match(testEvent()) {
		t.Error("filters should decide, ignoring filter.attributes")
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	f, err := Compile(nil, []Spec{{All: []Spec{
		{Exact: map[string]string{"type": "com.example.order.created"}},
		{Prefix: map[string]string{"region": "eu-"}},
		{Suffix: map[string]string{"source": "/orders"}},
		{Not: &Spec{Exact: map[string]string{"tenant": "x"}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := Compile(map[string]string{"type": "com.example.order.created", "region": ""}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := testEvent()
	if n := testing.AllocsPerRun(100, func() {
		if !f.Match(e) || !a.Match(e) {
			t.Fatal("no match")
		}
	}); n != 0 {
		t.Errorf("Match allocates %v times per call", n)
	}
}
