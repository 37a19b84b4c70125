package jetstream

import (
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// When the filesystem under the embedded server fills up (another file took the space),
// the server keeps the write error on each stream that hit it and answers no publish to
// that stream any more, even once space is freed; only reloading JetStream clears it.
// diskHeal notices the error in the server's log, watches the data directory's free
// space, and reloads JetStream in the process once there is room again: stored messages
// and consumers are read back from the directory, Sluice's connection stays up.
const (
	// healMinFree is the free space that counts as room again.
	healMinFree = 16 << 20
	// healEvery is how often the free space is checked while the disk is full.
	healEvery = time.Second
)

// diskHeal is owned by Embedded: started by StartEmbedded, stopped by Shutdown.
type diskHeal struct {
	srv  *server.Server
	dir  string
	log  *slog.Logger
	full atomic.Bool
	stop chan struct{}
	once sync.Once // Shutdown may be called more than once
	wg   sync.WaitGroup
}

func newDiskHeal(srv *server.Server, dir string, log *slog.Logger) *diskHeal {
	return &diskHeal{srv: srv, dir: dir, log: log, stop: make(chan struct{})}
}

// noteError is called with every error the server logs.
func (h *diskHeal) noteError(msg string) {
	if strings.Contains(msg, "failed to store a msg") && strings.Contains(msg, "no space left on device") {
		if h.full.CompareAndSwap(false, true) {
			h.log.Warn("jetstream: the disk under the data directory is full; JetStream will be reloaded once space is freed",
				"data_dir", h.dir)
		}
	}
}

func (h *diskHeal) start() {
	h.wg.Go(func() {
		t := time.NewTicker(healEvery)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
				if h.full.Load() && freeBytes(h.dir) >= healMinFree {
					h.reload()
				}
			}
		}
	})
}

// reload shuts JetStream down and enables it again on the same directory and limits.
func (h *diskHeal) reload() {
	cfg := *h.srv.JetStreamConfig()
	cfg.StoreDir = h.dir // EnableJetStream adds the "jetstream" directory itself
	if err := h.srv.ShutdownJetStream(); err != nil {
		h.log.Error("jetstream: reload after disk full: shutdown", "err", err)
		return
	}
	if err := h.srv.EnableJetStream(&cfg); err != nil {
		h.log.Error("jetstream: reload after disk full: enable; retrying", "err", err)
		return
	}
	h.full.Store(false)
	h.log.Info("jetstream: space freed, JetStream reloaded", "data_dir", h.dir)
}

func (h *diskHeal) close() {
	h.once.Do(func() { close(h.stop) })
	h.wg.Wait()
}

// freeBytes is the space available to unprivileged writers on dir's filesystem, or 0.
func freeBytes(dir string) int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0
	}
	return int64(st.Bavail) * int64(st.Bsize)
}
