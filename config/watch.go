package config

import (
	"context"
	"crypto/sha256"
	"time"
)

// DefaultWatchInterval is the polling interval Watch uses when given 0.
const DefaultWatchInterval = 250 * time.Millisecond

// Watch polls the configuration at path every interval (DefaultWatchInterval if 0) until
// ctx is done. It first loads the configuration as it is when called and reports it; after
// that it reports only changes. A valid configuration goes to apply; an invalid or
// unreadable one goes to onError with the reason, and the caller keeps running the
// configuration it has. Each distinct state is reported once.
//
// Changes are detected by hashing the names and contents of the files, so an editor's
// write-to-temporary-then-rename, a file added to or removed from a directory, and a
// change inside the same second are all seen. apply and onError are called from Watch's
// goroutine, one at a time; Watch returns when ctx is done.
func Watch(ctx context.Context, path string, interval time.Duration, apply func(*Config), onError func(error)) {
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	var last [sha256.Size]byte
	first := true
	check := func() {
		files, err := readFiles(path)
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
		cfg, err := load(files)
		if err != nil {
			onError(err)
			return
		}
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
