package httpserver

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"time"
)

// TLS connections (WithTLS). The server does each connection's TLS handshake itself,
// as net/http's ServeTLS would, and hands the connection to net/http: an HTTP/2 one as
// the *tls.Conn (net/http serves it with its HTTP/2 server), an HTTP/1.1 one as a
// frameConn over it, so that request smuggling is refused over TLS as on plain
// connections (smuggle.go). net/http gives a frameConn's requests no TLS state; guard
// (budget.go) sets it from the handshake's.

// serveTLS accepts connections, shakes hands on each in a goroutine of its own, and
// hands them to net/http, until Shutdown or Close.
func (s *Server) serveTLS() error {
	return s.serveConns(s.ln.Accept, func(nc net.Conn) {
		if !s.trackHandshake(nc) {
			_ = nc.Close()
			return
		}
		go s.handshake(nc)
	})
}

// handshake does nc's TLS handshake, bounded as net/http bounds it (the least of the
// read-header, read and write timeouts), and hands the connection to net/http.
func (s *Server) handshake(nc net.Conn) {
	defer s.wg.Done()
	defer s.untrackHandshake(nc)
	o := &s.opts
	_ = nc.SetDeadline(time.Now().Add(min(o.readHeaderTimeout, o.readTimeout, o.writeTimeout)))
	tc := tls.Server(nc, s.hs.TLSConfig)
	if err := tc.HandshakeContext(context.Background()); err != nil {
		reason := err.Error()
		var re tls.RecordHeaderError
		if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
			_, _ = io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
			reason = "client sent an HTTP request to an HTTPS server"
		}
		s.logf("http: TLS handshake error from %s: %v", nc.RemoteAddr(), reason)
		_ = nc.Close()
		return
	}
	_ = nc.SetDeadline(time.Time{})
	var c net.Conn = tc
	if st := tc.ConnectionState(); st.NegotiatedProtocol != "h2" {
		c = &frameConn{Conn: tc, tls: &st}
	}
	if !s.handoff.give(c) {
		_ = c.Close()
	}
}

// looksLikeHTTP reports whether a TLS record header is the start of a plain HTTP request,
// as net/http tells it.
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

// trackHandshake adds nc to the connections in their handshake, which Shutdown and Close
// close; false once shutting down.
func (s *Server) trackHandshake(nc net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting.Load() {
		return false
	}
	s.handshakes[nc] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *Server) untrackHandshake(nc net.Conn) {
	s.mu.Lock()
	delete(s.handshakes, nc)
	s.mu.Unlock()
}

// closeHandshakes closes the connections still in their handshake.
func (s *Server) closeHandshakes() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for nc := range s.handshakes {
		_ = nc.Close()
	}
}
