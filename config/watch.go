package config

import (
	"context"
	"crypto/sha256"
	"os"
	"time"
)

// DefaultWatchInterval is the polling interval Watch uses when given 0.
const DefaultWatchInterval = 250 * time.Millisecond

// Watch polls the configuration at path (and the refs file, WithRefsFile) every
// interval (DefaultWatchInterval if 0) until ctx is done. It first reads the
// configuration as it is when called and reports it; after that it reports only changes.
//
// Each object stands alone: the configuration goes to apply with every object's status,
// its ready objects to be run; an object whose new version is invalid keeps its last
// good version (reported not ready, with the reason). What cannot be read at all (a
// missing file, a broken refs file) goes to onError, and the caller keeps running what
// it has. Each distinct state is reported once.
//
// Changes are detected by hashing the names and contents of the files, so an editor's
// write-to-temporary-then-rename, a file added to or removed from a directory, and a
// change inside the same second are all seen. apply and onError are called from Watch's
// goroutine, one at a time; Watch returns when ctx is done.
func Watch(ctx context.Context, path string, interval time.Duration, apply func(*Config), onError func(error), opts ...Option) {
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	st, err := newSettings(opts)
	if err != nil {
		onError(err)
		return
	}
	var last [sha256.Size]byte
	first := true
	prev := st.previous
	check := func() {
		files, err := readFiles([]string{path})
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
		if st.refsFile != "" {
			refsData, refsErr = os.ReadFile(st.refsFile)
			h.Write([]byte("refs\x00"))
			h.Write(refsData)
			if refsErr != nil {
				h.Write([]byte(refsErr.Error()))
			}
		}
		var sum [sha256.Size]byte
		h.Sum(sum[:0])
		if !first && sum == last {
			return
		}
		first, last = false, sum
		if err != nil {
			onError(err)
			return
		}
		var refs []RefEntry
		if st.refsFile != "" {
			if refsErr == nil {
				refs, refsErr = parseRefs(st.refsFile, refsData)
			}
			if refsErr != nil {
				onError(refsErr)
				return
			}
		}
		s := *st
		s.previous = prev
		cfg, err := load(files, refs, &s)
		if err != nil {
			onError(err)
			return
		}
		prev = cfg
		apply(cfg)
	}
	check()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			check()
		}
	}
}
