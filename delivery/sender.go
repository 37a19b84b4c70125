package delivery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
	hdrTTL     = "Ce-Knativebrokerttl"
	maxErrData = 1024     // bytes of a failure's body kept for knativeerrordata
	maxDrain   = 64 << 10 // bytes of an unwanted body read to keep the connection
)

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
	end        time.Time // when the attempt ended; zero: none was made
}

func (o *outcome) ok() bool { return o.status >= 200 && o.status < 300 }

// request is a pooled outgoing request: the header map and body reader are reused once
// the response body is closed, which net/http documents as the point after which a
// request may be reused. The body reader is used only with Sluice's own transport:
// net/http's HTTP/2 transport may still read a body after that point. The map is empty
// in the pool. Sluice's own transport
// (h1.Transport) writes the attempt's headers straight into the request's bytes and
// leaves it empty.
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

// attemptHead is the header of one attempt: the event's binary-mode headers
// (event.EachHeader) and what send adds to them.
type attemptHead struct {
	e             *event.Event
	enc           event.HeaderEncoding
	toSubscriber  bool             // strip knativebrokerttl, send "Prefer: reply"
	structured    bool             // the event is the body (JSON): no ce- headers
	th            *tracing.Headers // the attempt's trace context, replacing the event's; nil: none
	authorization string           // the destination's audience: never logged
}

// each calls fn with each of the attempt's headers, each name once.
func (a *attemptHead) each(fn func(name, value string)) {
	if a.structured {
		fn("Content-Type", event.MediaTypeStructured)
	} else {
		event.EachHeader(a.e, a.enc, func(k, v string) {
			if (a.toSubscriber && k == hdrTTL) || (a.th != nil && tracing.Replaces(k)) {
				return
			}
			fn(k, v)
		})
	}
	if a.toSubscriber {
		fn("Prefer", "reply")
	}
	if a.th != nil {
		a.th.Each(func(k, v string) {
			if !a.structured || !tracing.Replaces(k) { // structured: the JSON carries them
				fn(k, v)
			}
		})
	}
	if a.authorization != "" {
		fn("Authorization", a.authorization)
	}
}

// writeTo sets the attempt's headers on h (an empty map), for transports other than
// Sluice's own. The values share one backing array.
func (a *attemptHead) writeTo(h http.Header) {
	vals := make([]string, 0, 12+len(a.e.Extensions))
	a.each(func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	})
}

// send POSTs e to u with one attempt bounded by timeout: in binary mode, or with
// structured in structured mode (the event as JSON is the body, Content-Type
// application/cloudevents+json; a DeliverySpec's format: json). To a subscriber
// (toSubscriber) the knativebrokerttl extension is stripped, as Knative does, "Prefer:
// reply" is sent and a 2xx response is read for a reply event (at most maxReply bytes).
// A reply posted to a reply URL keeps its knativebrokerttl, so that the loop guard works
// when that URL is a broker.
//
// th, when tracing is on, is the attempt's trace context: it replaces the event's own.
func send(ctx context.Context, c *http.Client, u *url.URL, e *event.Event, timeout time.Duration,
	toSubscriber bool, maxReply int64, enc event.HeaderEncoding, structured bool, th *tracing.Headers, authorization string) (o outcome) {
	r := requestPool.Get().(*request)
	head := attemptHead{e: e, enc: enc, toSubscriber: toSubscriber, structured: structured, th: th, authorization: authorization}
	r.tmpl.URL = u
	r.tmpl.Host = u.Host
	body := e.Data
	if structured {
		body = structuredBody(e, toSubscriber, th)
	}
	if len(body) > 0 {
		if ownTransport(c, u) {
			r.body.Reset(body)
			r.tmpl.Body = &r.body
		} else {
			// net/http's HTTP/2 transport may read the body in another goroutine after
			// the response is closed: a reader of its own, never the pooled one.
			r.tmpl.Body = io.NopCloser(bytes.NewReader(body))
		}
		r.tmpl.ContentLength = int64(len(body))
	} else {
		r.tmpl.Body = http.NoBody
		r.tmpl.ContentLength = 0
	}
	start := time.Now()
	resp, err := roundTrip(ctx, c, &r.tmpl, &head, start.Add(timeout))
	if err != nil {
		// The transport may still close the body in another goroutine: do not reuse r.
		o.end = time.Now()
		o.latency = o.end.Sub(start)
		o.err = err
		o.timedOut = errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
		o.final = errors.Is(err, ErrEgressDenied) // the same address is denied next time
		o.errData = []byte("dispatch error: " + err.Error())
		return o
	}
	if n := headerFields(resp.Header); n > MaxResponseHeaderFields {
		// net/http's transport (https) bounds the head's bytes only; Sluice's own counts
		// its fields as it reads them.
		resp.Body.Close()
		o.end = time.Now()
		o.latency = o.end.Sub(start)
		o.err = fmt.Errorf("%w: %d header fields, more than %d (MaxResponseHeaderFields)", ErrResponseHeadTooLarge, n, MaxResponseHeaderFields)
		o.errData = []byte("dispatch error: " + o.err.Error())
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
	o.end = time.Now()
	o.latency = o.end.Sub(start)
	clear(r.h) // pooled empty; clearing an empty map costs nothing
	r.tmpl.Body = nil
	r.tmpl.URL = nil
	requestPool.Put(r)
	return o
}

// structuredBody is e in the JSON event format, as binary mode would send it: without
// its knativebrokerttl when toSubscriber, with th's trace context (when not nil) for
// its own.
func structuredBody(e *event.Event, toSubscriber bool, th *tracing.Headers) []byte {
	_, ttl := e.Get(ExtTTL)
	if (ttl && toSubscriber) || th != nil {
		e = e.Clone()
		if toSubscriber {
			e.Delete(ExtTTL)
		}
		if th != nil {
			e.Set(tracing.ExtTraceParent, th.TraceParent)
			e.Delete(tracing.ExtTraceState)
			if th.TraceState != "" {
				e.Set(tracing.ExtTraceState, th.TraceState)
			}
		}
	}
	return event.AppendJSON(make([]byte, 0, e.Size()+64), e)
}

// roundTrip sends req (whose context is not set) until ctx ends or dl passes, with
// head's headers if head is not nil (req.Header then an empty map) or req.Header's. A
// client without a cookie jar or overall timeout (NewClient's) is bypassed for its
// transport: the client's redirect machinery copies every request's headers, and Sluice
// follows no redirects anyway (a 3xx is a failed delivery). Sluice's own transport takes
// dl as the connection's deadline and writes head straight into the request's bytes, so
// an http:// attempt costs no context, timer, request copy or header map of its own;
// other transports get head on req.Header and the request with a context bounded by dl.
func roundTrip(ctx context.Context, c *http.Client, req *http.Request, head *attemptHead, dl time.Time) (*http.Response, error) {
	direct := c.Jar == nil && c.Timeout == 0
	if ownTransport(c, req.URL) {
		ut := c.Transport.(untilRoundTripper)
		var header func(yield func(name, value string))
		if head != nil {
			header = head.each
		}
		return ut.RoundTripUntil(ctx, req, header, dl)
	}
	if head != nil {
		head.writeTo(req.Header)
	}
	if !direct {
		return doUntil(ctx, dl, req, c.Do)
	}
	rt := c.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	return doUntil(ctx, dl, req, rt.RoundTrip)
}

// ownTransport reports whether roundTrip sends a request to u on c through Sluice's own
// transport (RoundTripUntil), which has read the whole body when it returns; net/http's
// may go on reading it in another goroutine (HTTP/2).
func ownTransport(c *http.Client, u *url.URL) bool {
	_, ok := c.Transport.(untilRoundTripper)
	return ok && c.Jar == nil && c.Timeout == 0 && u.Scheme == "http"
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

// headerFields counts the fields of h.
func headerFields(h http.Header) int {
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	return n
}

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
