// Package cevent encodes the CloudEvents the load kit sends, in the three HTTP modes
// (binary, structured, batch), and names the extension attributes that let a receiver
// compute end-to-end latency, loss and duplicates.
//
// It is deliberately self-contained (no CloudEvents SDK): the load kit builds each
// request from pre-encoded bytes and only appends the few values that change per event
// (id, sequence number, send timestamp), which keeps the generator cheap.
package cevent

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
)

// Extension attribute names carried by every event the kit sends. CloudEvents requires
// lower-case alphanumeric names; in binary mode they travel as ce-<name> headers.
const (
	// ExtSent is the intended send time of the event, in Unix nanoseconds, as a string
	// of decimal digits (too large for a CloudEvents Integer). Latency measured from it
	// includes any time the generator fell behind (no coordinated omission).
	ExtSent = "sluicesent"
	// ExtSeq is the event's sequence number within its run, from 0, as decimal digits.
	ExtSeq = "sluiceseq"
	// ExtRun identifies one load run, so a receiver keeps sequence gaps per run.
	ExtRun = "sluicerun"
	// ExtWarmup is "1" on events sent during warm-up; receivers count them for loss but
	// keep them out of latency statistics.
	ExtWarmup = "sluicewarmup"
)

// Defaults shared by gen and load.
const (
	// DefaultType is cegen's default event type.
	DefaultType = "io.triggermesh.perf.drill"
	// DefaultSource is the source of events sent by the kit unless told otherwise.
	DefaultSource = "sluice.loadkit"
	// ContentTypeJSON is the data content type of the payload.
	ContentTypeJSON = "application/json"
	// ContentTypeStructured is the content type of one structured-mode event.
	ContentTypeStructured = "application/cloudevents+json"
	// ContentTypeBatch is the content type of a batch of structured events.
	ContentTypeBatch = "application/cloudevents-batch+json"
)

// Mode is the HTTP content mode of the requests.
type Mode int

// Content modes.
const (
	Binary     Mode = iota // attributes in ce-* headers, data as the body
	Structured             // one JSON event as the body
	Batch                  // a JSON array of events as the body
)

// ParseMode parses "binary", "structured" or "batch".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "binary", "":
		return Binary, nil
	case "structured":
		return Structured, nil
	case "batch":
		return Batch, nil
	}
	return 0, fmt.Errorf("mode %q: want binary, structured or batch", s)
}

// String returns the mode's flag spelling.
func (m Mode) String() string {
	switch m {
	case Structured:
		return "structured"
	case Batch:
		return "batch"
	}
	return "binary"
}

// Template holds everything that is the same for every event of a run. It is immutable
// after NewTemplate and safe for concurrent use; the Append methods write into buffers
// the caller owns.
type Template struct {
	Mode      Mode
	Type      string
	Source    string
	Run       string
	Data      []byte
	BatchSize int // events per request in Batch mode (≥ 1)

	structPrefix []byte // `{"specversion":"1.0","type":…,"source":…,"sluicerun":…,"id":"`
	structData   []byte // `,"datacontenttype":"application/json","data":…}` or data_base64
}

// NewTemplate validates and pre-encodes a template.
func NewTemplate(mode Mode, typ, source, run string, data []byte, batchSize int) (*Template, error) {
	if typ == "" || source == "" || run == "" {
		return nil, fmt.Errorf("event template: type, source and run id must not be empty")
	}
	if batchSize < 1 {
		batchSize = 1
	}
	t := &Template{Mode: mode, Type: typ, Source: source, Run: run, Data: data, BatchSize: batchSize}
	var b bytes.Buffer
	b.WriteString(`{"specversion":"1.0","type":`)
	writeJSONString(&b, typ)
	b.WriteString(`,"source":`)
	writeJSONString(&b, source)
	b.WriteString(`,"` + ExtRun + `":`)
	writeJSONString(&b, run)
	b.WriteString(`,"id":"`)
	t.structPrefix = append([]byte(nil), b.Bytes()...)
	b.Reset()
	if json.Valid(data) {
		b.WriteString(`,"datacontenttype":"application/json","data":`)
		var c bytes.Buffer
		if err := json.Compact(&c, data); err != nil {
			return nil, fmt.Errorf("event template: compact data: %w", err)
		}
		b.Write(c.Bytes())
	} else {
		b.WriteString(`,"data_base64":"`)
		b.WriteString(base64.StdEncoding.EncodeToString(data))
		b.WriteString(`"`)
	}
	b.WriteString("}")
	t.structData = append([]byte(nil), b.Bytes()...)
	return t, nil
}

func writeJSONString(b *bytes.Buffer, s string) {
	q, _ := json.Marshal(s) // marshalling a string cannot fail
	b.Write(q)
}

// ContentType is the Content-Type header of the requests.
func (t *Template) ContentType() string {
	switch t.Mode {
	case Structured:
		return ContentTypeStructured
	case Batch:
		return ContentTypeBatch
	}
	return ContentTypeJSON
}

// EventsPerRequest is 1, or BatchSize in batch mode.
func (t *Template) EventsPerRequest() int {
	if t.Mode == Batch {
		return t.BatchSize
	}
	return 1
}

// AppendID appends the event id for sequence number seq: "<run>-<seq>".
func (t *Template) AppendID(dst []byte, seq uint64) []byte {
	dst = append(dst, t.Run...)
	dst = append(dst, '-')
	return strconv.AppendUint(dst, seq, 10)
}

// AppendBody appends the request body carrying events seq, seq+1, … (one event unless
// batch mode), all with intended send time sent (Unix ns). In binary mode the body is
// the data alone.
func (t *Template) AppendBody(dst []byte, seq uint64, sent int64, warmup bool) []byte {
	switch t.Mode {
	case Structured:
		return t.appendStructured(dst, seq, sent, warmup)
	case Batch:
		dst = append(dst, '[')
		for i := 0; i < t.BatchSize; i++ {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = t.appendStructured(dst, seq+uint64(i), sent, warmup)
		}
		return append(dst, ']')
	}
	return append(dst, t.Data...)
}

func (t *Template) appendStructured(dst []byte, seq uint64, sent int64, warmup bool) []byte {
	dst = append(dst, t.structPrefix...)
	dst = t.AppendID(dst, seq)
	dst = append(dst, `","`+ExtSeq+`":"`...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, `","`+ExtSent+`":"`...)
	dst = strconv.AppendInt(dst, sent, 10)
	dst = append(dst, '"')
	if warmup {
		dst = append(dst, `,"`+ExtWarmup+`":"1"`...)
	}
	return append(dst, t.structData...)
}
