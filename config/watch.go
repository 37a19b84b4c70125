package config

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"slices"
	"time"
)

// DefaultWatchInterval is the polling interval Watch uses when given 0.
const DefaultWatchInterval = 250 * time.Millisecond

// WatchRereadInterval is how often Watch reads every file again even though none seems
// changed: an edit that keeps a file's size and modification time (on a file system
// that keeps whole seconds, a same-size edit within the second) is seen within it.
const WatchRereadInterval = 10 * time.Second

// Watch polls the configuration at path (and the refs file, WithRefsFile) every
// interval (DefaultWatchInterval if 0) until ctx is done. It first reads the
// configuration as it is when called and reports it; after that it reports only changes.
//
// Each object stands alone: the configuration goes to apply with every object's status,
// its ready objects to be run; an object whose new version is invalid keeps its last
// good version (reported not ready, with the reason). A file that is empty, or that has
// a document that does not parse, keeps the last good version of every object it held
// (an editor writing the file in place empties it first). What cannot be read at all (a
// missing file, a broken refs file, a configuration over MaxConfigBytes or
// MaxExpandedBytes) goes to onError, and the caller keeps running what it has. Each
// distinct state is reported once.
//
// Each tick looks at the files' names, sizes, modification times and identities (an
// editor's write-to-temporary-then-rename makes a new file): only when one of them
// changed, and has stayed the same for one more tick (a file being written settles
// first), are the files read; they are also read every WatchRereadInterval. A read is
// compared by the hash of the names and contents, so only a change of content is
// reported. apply and onError are called from Watch's goroutine, one at a time; Watch
// returns when ctx is done.
func Watch(ctx context.Context, path string, interval time.Duration, apply func(*Config), onError func(error), opts ...Option) {
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	st, err := newSettings(opts)
	if err != nil {
		onError(err)
		return
	}
	w := &watcher{path: path, st: st, apply: apply, onError: onError, prev: st.previous, first: true}
	w.check()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.check()
		}
	}
}

// watcher is the state of one Watch.
type watcher struct {
	path     string
	st       *settings
	apply    func(*Config)
	onError  func(error)
	prev     *Config // the configuration last applied
	first    bool    // nothing read yet
	stamps   []stamp // the files as they were at the last read
	pending  []stamp // a change seen at the last tick, read when it holds still
	lastRead time.Time
	last     [sha256.Size]byte // the hash of the last read
	reads    int               // reads of the files, which tests count
}

// stamp is what a tick sees of one file, without reading it.
type stamp struct {
	name    string
	size    int64
	modTime time.Time
	info    os.FileInfo // compared with os.SameFile: a file renamed over it is another
	err     string      // the file (or the listing) could not be looked at
}

func (s stamp) equal(t stamp) bool {
	return s.name == t.name && s.size == t.size && s.modTime.Equal(t.modTime) && s.err == t.err &&
		(s.info == nil) == (t.info == nil) && (s.info == nil || os.SameFile(s.info, t.info))
}

// look stamps the configuration's files and the refs file.
func (w *watcher) look() []stamp {
	var out []stamp
	names, err := listFiles([]string{w.path})
	if err != nil {
		out = append(out, stamp{name: w.path, err: err.Error()})
	}
	if w.st.refsFile != "" {
		names = append(names, w.st.refsFile)
	}
	for _, n := range names {
		s := stamp{name: n}
		fi, err := os.Stat(n)
		if err != nil {
			s.err = err.Error()
		} else {
			s.size, s.modTime, s.info = fi.Size(), fi.ModTime(), fi
		}
		out = append(out, s)
	}
	return out
}

// check is one tick: it reads the files when they changed and have held still since the
// last tick, or when a read is due anyway.
func (w *watcher) check() {
	now := w.look()
	changed := !slices.EqualFunc(now, w.stamps, stamp.equal)
	switch {
	case w.first:
	case changed && !slices.EqualFunc(now, w.pending, stamp.equal):
		w.pending = now // seen changing: read when it holds still
		return
	case !changed && time.Since(w.lastRead) < WatchRereadInterval:
		w.pending = nil
		return
	}
	w.pending = nil
	w.read(now)
}

// read reads the files and reports their configuration if it changed.
func (w *watcher) read(stamps []stamp) {
	w.reads++
	w.stamps, w.lastRead = stamps, time.Now()
	files, err := readFiles([]string{w.path})
	h := sha256.New()
	if err != nil {
		h.Write([]byte("error\x00" + err.Error()))
	}
	for _, f := range files {
		h.Write([]byte(f.name))
		h.Write([]byte{0})
		h.Write(f.data)
		h.Write([]byte{0})
	}
	var refsData []byte
	var refsErr error
	if w.st.refsFile != "" {
		refsData, refsErr = readBounded(w.st.refsFile, MaxConfigBytes, "is")
		h.Write([]byte("refs\x00"))
		h.Write(refsData)
		if refsErr != nil {
			h.Write([]byte(refsErr.Error()))
		}
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	if !w.first && sum == w.last {
		return
	}
	w.first, w.last = false, sum
	if err != nil {
		w.onError(err)
		return
	}
	var refs []RefEntry
	if w.st.refsFile != "" {
		if refsErr == nil {
			refs, refsErr = parseRefs(w.st.refsFile, refsData)
		} else {
			refsErr = fmt.Errorf("config: refs file: %w", refsErr)
		}
		if refsErr != nil {
			w.onError(refsErr)
			return
		}
	}
	s := *w.st
	s.previous = w.prev
	cfg, err := load(files, refs, &s)
	if err != nil {
		w.onError(err)
		return
	}
	w.prev = cfg
	w.apply(cfg)
}
