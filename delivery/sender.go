package delivery

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/tracing"
)

// Header names the sender writes or strips.
const (
	hdrTTL         = "Ce-Knativebrokerttl"
	maxErrData     = 1024     // bytes of a failure's body kept for knativeerrordata
	maxDrain       = 64 << 10 // bytes of an unwanted body read to keep the connection
	defaultMaxRepl = 4 << 20
)

var preferReply = []string{"reply"}

// outcome is the result of one HTTP attempt.
type outcome struct {
	status     int           // HTTP status; 0 for a network error or timeout
	timedOut   bool          // the attempt hit Policy.Timeout
	err        error         // transport error, when status is 0
	final      bool          // a failure no retry can mend (a reply the channel can never store)
	retryAfter time.Duration // Retry-After of a 429/503, 0 if none
	errData    []byte        // at most 1024 bytes of a failure's body, or the error text
	reply      *event.Event  // a 2xx's reply event
	replyErr   error         // a 2xx carried an invalid event
	notEvent   bool          // a 2xx carried a body that is not an event
	latency    time.Duration
}

func (o *outcome) ok() bool { return o.status >= 200 && o.status < 300 }

// request is a pooled outgoing request: the header map and body reader are reused once
// the response body is closed, which net/http documents as the point after which a
// request may be reused.
type request struct {
	h    http.Header
	body reqBody
	tmpl http.Request
}

type reqBody struct{ bytes.Reader }

func (*reqBody) Close() error { return nil }

var requestPool = sync.Pool{New: func() any {
	r := &request{h: make(http.Header, 16)}
	r.tmpl = http.Request{Method: http.MethodPost, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: r.h}
	return r
}}

// send POSTs e in binary mode to u with one attempt bounded by timeout. To a subscriber
// (toSubscriber) the knativebrokerttl extension is stripped, as Knative does, "Prefer:
// reply" is sent and a 2xx response is read for a reply event (at most maxReply bytes).
// A reply posted to a reply URL keeps its knativebrokerttl, so that the loop guard works
// when that URL is a broker.
//
// th, when tracing is on, is the attempt's trace context: it replaces the event's own.
func send(ctx context.Context, c *http.Client, u *url.URL, e *event.Event, timeout time.Duration,
	toSubscriber bool, maxReply int64, enc event.HeaderEncoding, th *tracing.Headers, authorization string) (o outcome) {
	r := requestPool.Get().(*request)
	clear(r.h)
	event.WriteHeadersAs(r.h, e, enc)
	if toSubscriber {
		delete(r.h, hdrTTL)
		r.h["Prefer"] = preferReply
	}
	if th != nil {
		th.Write(r.h)
	}
	if authorization != "" { // the destination's audience: never logged
		r.h["Authorization"] = []string{authorization}
	}
	r.tmpl.URL = u
	r.tmpl.Host = u.Host
	if len(e.Data) > 0 {
		r.body.Reset(e.Data)
		r.tmpl.Body = &r.body
		r.tmpl.ContentLength = int64(len(e.Data))
	} else {
		r.tmpl.Body = http.NoBody
		r.tmpl.ContentLength = 0
	}
	start := time.Now()
	resp, err := roundTrip(ctx, c, &r.tmpl, start.Add(timeout))
	if err != nil {
		// The transport may still close the body in another goroutine: do not reuse r.
		o.latency = time.Since(start)
		o.err = err
		o.timedOut = errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
		o.errData = []byte("dispatch error: " + err.Error())
		return o
	}
	o.status = resp.StatusCode
	if o.ok() {
		if toSubscriber {
			o.reply, o.replyErr = event.ReadResponse(resp, maxReply)
		}
		if n := drain(resp.Body); n > 0 && o.reply == nil && o.replyErr == nil {
			o.notEvent = true
		}
	} else {
		buf := make([]byte, maxErrData)
		n, rerr := io.ReadFull(resp.Body, buf)
		if n > 0 {
			o.errData = buf[:n]
		}
		if rerr == nil {
			drain(resp.Body)
		}
		if o.status == http.StatusTooManyRequests || o.status == http.StatusServiceUnavailable {
			o.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
	}
	resp.Body.Close()
	o.latency = time.Since(start)
	r.tmpl.Body = nil
	r.tmpl.URL = nil
	requestPool.Put(r)
	return o
}

// roundTrip sends req (whose context is not set) until ctx ends or dl passes. A client
// without a cookie jar or overall timeout (NewClient's) is bypassed for its transport:
// the client's redirect machinery copies every request's headers, and Sluice follows no
// redirects anyway (a 3xx is a failed delivery). Sluice's own transport takes dl as the
// connection's deadline, so an http:// attempt costs no context, timer or request copy
// of its own; other transports get the request with a context bounded by dl.
func roundTrip(ctx context.Context, c *http.Client, req *http.Request, dl time.Time) (*http.Response, error) {
	if c.Jar != nil || c.Timeout != 0 {
		return doUntil(ctx, dl, req, c.Do)
	}
	rt := c.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	if h1, ok := rt.(*h1Transport); ok && req.URL.Scheme == "http" {
		return h1.roundTrip(ctx, req, dl)
	}
	return doUntil(ctx, dl, req, rt.RoundTrip)
}

// doUntil calls do with req bound to ctx and dl. The context is not cancelled when do
// returns: the response body is read after, under it; its timer ends at dl.
func doUntil(ctx context.Context, dl time.Time, req *http.Request, do func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	actx, cancel := context.WithDeadline(ctx, dl)
	resp, err := do(req.WithContext(actx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose cancels a response's context once its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

var drainPool = sync.Pool{New: func() any { b := make([]byte, 4096); return &b }}

// drain reads and discards at most maxDrain bytes of body, so that the connection can be
// reused, and returns how many it read.
func drain(body io.Reader) int {
	if body == http.NoBody {
		return 0
	}
	bp := drainPool.Get().(*[]byte)
	n := 0
	for n < maxDrain {
		m, err := body.Read(*bp)
		n += m
		if err != nil {
			break
		}
	}
	drainPool.Put(bp)
	return n
}
