package filter

import (
	"fmt"
	"time"

	cesql "github.com/cloudevents/sdk-go/sql/v2"
	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/sluice-broker/sluice/event"
)

// cesqlFilter is the Subscriptions API "cesql" dialect: a CloudEvents SQL expression,
// parsed once with the grammar and expressions of github.com/cloudevents/sdk-go/sql/v2
// (LIKE is Sluice's own: cesqlparse.go). The event passes when the
// expression evaluates to the boolean true; an evaluation error (a missing attribute, a
// failed cast, a division by zero…) or a result of another type means no match, as in
// Knative's cesql filter.
//
// The sdk evaluates its own cloudevents.Event, so Match converts the event first, which
// allocates (see BenchmarkMatch). Extension values reach the expression as strings, as
// they do over HTTP; CESQL casts them where an operator needs an integer or a boolean.
type cesqlFilter struct {
	source string
	expr   cesql.Expression
}

var _ Filter = (*cesqlFilter)(nil)

// shorten keeps an expression quoted in an error to its first 128 bytes.
func shorten(expr string) string {
	if len(expr) <= 128 {
		return expr
	}
	return expr[:128] + "…"
}

// compileCESQL parses expr; a parse error is returned with the expression.
//
// The sdk's parser panics on some malformed input (for example "type = "); such a panic
// is reported as a parse error.
func compileCESQL(expr string) (f *cesqlFilter, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("invalid expression %q: not valid CESQL syntax", shorten(expr))
		}
	}()
	parsed, err := parseCESQL(expr)
	if err != nil {
		return nil, fmt.Errorf("invalid expression %q: %w", shorten(expr), err)
	}
	return &cesqlFilter{source: expr, expr: parsed}, nil
}

// Match evaluates the expression against e.
func (f *cesqlFilter) Match(e *event.Event) bool {
	return f.matchSDK(toSDK(e))
}

// matchSDK evaluates the expression against an sdk event.
func (f *cesqlFilter) matchSDK(ce cloudevents.Event) (ok bool) {
	defer func() {
		// The sdk's evaluator is a third-party tree walker: a panic in it must not take a
		// dispatcher down, and means the event does not match.
		if recover() != nil {
			ok = false
		}
	}()
	v, err := f.expr.Evaluate(ce)
	if err != nil {
		return false
	}
	b, isBool := v.(bool)
	return isBool && b
}

// toSDK converts e to the sdk's event, attributes and extensions only (CESQL cannot read
// data). e is assumed valid (the ingress validated it); a value the sdk rejects is left
// unset, so an expression reading it fails and does not match.
func toSDK(e *event.Event) cloudevents.Event {
	ce := cloudevents.NewEvent(cloudevents.VersionV1)
	ce.SetID(e.ID)
	ce.SetSource(e.Source)
	ce.SetType(e.Type)
	if e.Subject != "" {
		ce.SetSubject(e.Subject)
	}
	if e.DataContentType != "" {
		ce.SetDataContentType(e.DataContentType)
	}
	if e.DataSchema != "" {
		ce.SetDataSchema(e.DataSchema)
	}
	if e.Time != "" {
		if t, err := time.Parse(time.RFC3339Nano, e.Time); err == nil {
			ce.SetTime(t)
		}
	}
	for _, x := range e.Extensions {
		ce.SetExtension(x.Name, x.Value)
	}
	return ce
}
