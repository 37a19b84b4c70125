package ui

import (
	"embed"
	"net/http"
)

//go:embed static/index.html
var static embed.FS

// SnapshotPath is where the monitor's snapshot is served, relative to the server root.
const SnapshotPath = "/ui/snapshot.json"

// Handles reports whether path is one of the monitor's: /ui, /ui/ or /ui/snapshot.json.
// Any other path under /ui/ stays the ingress's: a broker in a namespace called "ui" keeps
// its address (except one named "snapshot.json").
func Handles(path string) bool { return path == "/ui" || path == "/ui/" || path == SnapshotPath }

// Handler serves the dashboard:
//
//	GET /ui/                 the page (HTML, CSS and script in one embedded file); /ui redirects here
//	GET /ui/snapshot.json    the last Snapshot, as JSON
//
// Both are answered from memory (the snapshot is encoded once per sample).
func (m *Monitor) Handler() http.Handler {
	page, err := static.ReadFile("static/index.html")
	if err != nil {
		panic("ui: the embedded page is missing: " + err.Error()) // a broken build, not a runtime condition
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, r.Method+" is not allowed here", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		switch r.URL.Path {
		case "/ui": // the page's links are relative to /ui/
			http.Redirect(w, r, "/ui/", http.StatusFound)
		case "/ui/":
			h.Set("Content-Type", "text/html; charset=utf-8")
			h.Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline' 'self'; style-src 'unsafe-inline' 'self'; img-src 'self' data:")
			_, _ = w.Write(page)
		case SnapshotPath:
			h.Set("Content-Type", "application/json")
			_, _ = w.Write(*m.encoded.Load())
		default:
			http.NotFound(w, r)
		}
	})
}
