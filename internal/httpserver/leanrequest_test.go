package httpserver

import (
	"bufio"
	"bytes"
	"net/http"
	"reflect"
	"testing"
)

// FuzzLeanHead: a head the lean parser takes is one net/http reads the same way — the
// same method, target, host, header and Content-Length — so that taking it changes
// nothing but the cost; built fresh, or in a request reused from the heads before it
// (WithRequestReuse).
func FuzzLeanHead(f *testing.F) {
	for _, seed := range []string{
		post[:len(post)-2],
		"POST /a?b=c HTTP/1.1\r\nhost: h:80\r\nce-id: 1\r\nX:  v \r\nx: w\r\nContent-Length: 10\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: [::1]:8080\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
		"POST /b HTTP/1.1\r\nHost: h\r\nX: a\tb\r\nContent-Length: 007\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	canon := newCanonNames()
	blank := (&http.Request{}).WithContext(f.Context())
	reused := &leanReq{hdr: make(http.Header)}
	f.Fuzz(func(t *testing.T, head []byte) {
		i := bytes.Index(head, []byte("\r\n\r\n"))
		if i < 0 {
			return
		}
		head = head[:i+4]
		var h leanHead
		if !parseLeanHead(head, &h) {
			return
		}
		want, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
		if err != nil {
			t.Fatalf("lean path took %q; net/http refuses it: %v", head, err)
		}
		want.Header.Del("Host") // a server moves it to Request.Host
		for _, into := range []*leanReq{nil, reused} {
			checkLeanRequest(t, head, h.request(into, blank, head, string(head), canon), want)
		}
	})
}

func checkLeanRequest(t *testing.T, head []byte, got, want *http.Request) {
	t.Helper()
	switch {
	case got.Method != want.Method, got.RequestURI != want.RequestURI, got.Host != want.Host,
		got.ContentLength != want.ContentLength, got.URL.String() != want.URL.String(),
		got.ProtoMajor != want.ProtoMajor, got.ProtoMinor != want.ProtoMinor:
		t.Fatalf("%q: lean %s %s %q len %d url %s; net/http %s %s %q len %d url %s", head,
			got.Method, got.RequestURI, got.Host, got.ContentLength, got.URL,
			want.Method, want.RequestURI, want.Host, want.ContentLength, want.URL)
	case !reflect.DeepEqual(got.Header, want.Header):
		t.Fatalf("%q: lean header %q; net/http %q", head, got.Header, want.Header)
	}
}
