package jetstream

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/event"
)

// holdProxy passes a NATS connection through, except that once armed, from the client's
// next pull request on, it keeps what the server sends until the client asks for a
// stream's info (what a replay does after a fetch that brought nothing): a server slow
// to deliver one page, whatever the timers.
type holdProxy struct {
	ln net.Listener

	mu      sync.Mutex
	armed   bool
	held    bool
	pending []byte
	client  net.Conn
}

func newHoldProxy(t *testing.T, target string) *holdProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
			p.mu.Lock()
			p.client = c
			p.mu.Unlock()
			go p.up(c, s)
			go p.down(s, c)
		}
	}()
	return p
}

// arm holds what the server sends from the client's next pull request on.
func (p *holdProxy) arm() {
	p.mu.Lock()
	p.armed = true
	p.mu.Unlock()
}

func (p *holdProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held {
		p.held = false
		_, _ = p.client.Write(p.pending)
		p.pending = nil
	}
}

// up copies client to server, releasing what is held when the client asks for a
// stream's info.
func (p *holdProxy) up(c, s net.Conn) {
	buf := make([]byte, 32<<10)
	var tail []byte
	for {
		n, err := c.Read(buf)
		if n > 0 {
			seen := append(tail, buf[:n]...)
			if bytes.Contains(seen, []byte("$JS.API.STREAM.INFO.")) {
				p.release()
			}
			if bytes.Contains(seen, []byte("$JS.API.CONSUMER.MSG.NEXT.")) {
				p.mu.Lock()
				p.held, p.armed = p.armed, false
				p.mu.Unlock()
			}
			tail = append([]byte(nil), seen[max(0, len(seen)-32):]...)
			if _, err := s.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			_ = s.Close()
			return
		}
	}
}

// down copies server to client, or keeps it while held.
func (p *holdProxy) down(s, c net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			p.mu.Lock()
			if p.held {
				p.pending = append(p.pending, buf[:n]...)
			} else if _, werr := c.Write(buf[:n]); werr != nil {
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
		}
		if err != nil {
			_ = c.Close()
			return
		}
	}
}

// TestArchiveReplaySlowPage: a replay whose second page the server is slow to send (the
// fetch brings nothing in its wait) fetches again, the archive still holding the rest,
// and yields every event of the window, instead of taking the rest as aged out.
func TestArchiveReplaySlowPage(t *testing.T) {
	e := startServer(t, t.TempDir(), WithListen("127.0.0.1:0"))
	p := newHoldProxy(t, strings.TrimPrefix(e.ClientURL(), "nats://"))
	nc, err := nats.Connect("nats://"+p.ln.Addr().String(), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c := newChannel(t, nc, "ns/slow", WithRetention(time.Hour))
	ctx := channeltest.Ctx(t, 60*time.Second)
	from := time.Now().Add(-time.Second)
	const n = archivePage + 44
	for i := range n {
		channeltest.Publish(t, c, []string{"a"}, &event.Event{SpecVersion: "1.0", ID: fmt.Sprintf("e%03d", i), Source: "/s", Type: "t"})
	}
	to := time.Now().Add(time.Second)
	var ids []string
	for st, err := range c.Replay(ctx, from, to) {
		if err != nil {
			t.Fatalf("after %d events: %v", len(ids), err)
		}
		ids = append(ids, st.Event.ID)
		if len(ids) == archivePage { // the first page is read: the next is slow to come
			p.arm()
		}
	}
	if len(ids) != n {
		t.Fatalf("replayed %d events, want %d", len(ids), n)
	}
	for i, id := range ids {
		if want := fmt.Sprintf("e%03d", i); id != want {
			t.Fatalf("event %d is %s, want %s", i, id, want)
		}
	}
}
