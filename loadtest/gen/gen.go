// Package gen writes an endless stream of vegeta JSON targets, each a binary-mode
// CloudEvent with a unique id, so that
//
//	sluice gen -u URL -d @data.json | vegeta attack -lazy -format=json
//
// works like triggermesh's cegen. One target per line:
//
//	{"method":"POST","url":URL,"body":BASE64(data),"header":{"Ce-Id":["<run>-<n>"],…}}
package gen

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"

	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/loadtest/cevent"
)

// Options configure a target stream.
type Options struct {
	URL    string // target URL (required)
	Data   []byte // event data, sent as the body
	Type   string // ce-type; cevent.DefaultType if empty
	Source string // ce-source; cevent.DefaultSource if empty
	Run    string // run id used in ce-id and ce-sluicerun (required)
	Count  uint64 // stop after Count targets; 0 = endless
}

// Write writes targets to w until ctx is cancelled, Count targets were written, or the
// reader goes away. A closed pipe (EPIPE, os.ErrClosed, io.ErrClosedPipe) ends the
// stream cleanly: it returns the number written and a nil error.
func Write(ctx context.Context, w io.Writer, o Options) (uint64, error) {
	if o.URL == "" || o.Run == "" {
		return 0, errors.New("gen: URL and run id are required")
	}
	if o.Type == "" {
		o.Type = cevent.DefaultType
	}
	if o.Source == "" {
		o.Source = cevent.DefaultSource
	}
	prefix, suffix, err := encodeFixed(o)
	if err != nil {
		return 0, err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	line := make([]byte, 0, len(prefix)+len(suffix)+64)
	var n uint64
	for o.Count == 0 || n < o.Count {
		if n&1023 == 0 && ctx.Err() != nil {
			break
		}
		// Every line is the fixed prefix, the varying id and sequence, the fixed suffix.
		line = append(line[:0], prefix...)
		line = append(line, o.Run...)
		line = append(line, '-')
		line = strconv.AppendUint(line, n, 10)
		line = append(line, `"],"Ce-Sluiceseq":["`...)
		line = strconv.AppendUint(line, n, 10)
		line = append(line, suffix...)
		if _, err := bw.Write(line); err != nil {
			return n, closedOK(err)
		}
		n++
	}
	return n, closedOK(bw.Flush())
}

// encodeFixed pre-encodes everything around the id: the prefix ends inside the Ce-Id
// array, the suffix closes the sequence header and the object.
func encodeFixed(o Options) (prefix, suffix []byte, err error) {
	url, err := json.Marshal(o.URL)
	if err != nil {
		return nil, nil, fmt.Errorf("gen: encode url: %w", err)
	}
	fixed, err := json.Marshal(map[string][]string{
		"Ce-Specversion": {"1.0"},
		"Ce-Type":        {event.EncodeHeaderValue(o.Type)},
		"Ce-Source":      {event.EncodeHeaderValue(o.Source)},
		"Ce-Sluicerun":   {o.Run},
		"Content-Type":   {cevent.ContentTypeJSON},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("gen: encode headers: %w", err)
	}
	prefix = append(prefix, `{"method":"POST","url":`...)
	prefix = append(prefix, url...)
	prefix = append(prefix, `,"body":"`...)
	prefix = append(prefix, base64.StdEncoding.EncodeToString(o.Data)...)
	prefix = append(prefix, `","header":`...)
	prefix = append(prefix, fixed[:len(fixed)-1]...) // drop the closing brace
	prefix = append(prefix, `,"Ce-Id":["`...)
	suffix = []byte("\"]}}\n")
	return prefix, suffix, nil
}

// closedOK maps "the reader went away" to a clean stop.
func closedOK(err error) error {
	if err == nil || errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrClosed) || errors.Is(err, io.ErrClosedPipe) {
		return nil
	}
	return fmt.Errorf("gen: write: %w", err)
}
