package faults

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// smallDisk mounts a tmpfs of size bytes under the test's temp dir and returns its path;
// it is unmounted when the test ends. Without the privilege to mount it skips.
func smallDisk(t *testing.T, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root): %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// fillDisk writes a file on dir's filesystem until it is full and returns its path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			return path
		}
	}
}

// diskRun loads the broker while its subscriber is down until ingress refuses for lack
// of space (or limit passes), checks the refusals carry Retry-After and the reason (the
// refusal seen then contains reason), brings the subscriber up, calls free, and checks
// that the stored events are delivered and ingress accepts again without a restart.
func diskRun(t *testing.T, fault, reason string, s *sink, url string, fill, free func()) {
	t.Helper()
	s.down.Store(true)
	fill()
	l := startFaultLoad(url, strings.ReplaceAll(fault, " ", ""), 400)
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if l.Count(503, 507, 429) >= 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	full := time.Now()
	whileFull := l.LastRefusal()
	if !strings.Contains(whileFull, reason) {
		t.Errorf("%s: refusal %q does not say %q", fault, whileFull, reason)
	}
	time.Sleep(time.Second)
	s.down.Store(false) // stored events must keep flowing while the disk is full
	stored := l.acceptedIDs(full)
	if _, ok := s.waitAll(stored, 60*time.Second); !ok {
		d, _ := s.count(stored)
		t.Errorf("%s: %d of %d events stored before the disk filled were delivered", fault, d, len(stored))
	}
	free()
	freed := time.Now()
	time.Sleep(10 * time.Second)
	l.Stop()
	all := l.acceptedIDs(time.Time{})
	if _, ok := s.waitAll(all, 60*time.Second); !ok {
		t.Errorf("%s: not every accepted event arrived", fault)
	}
	delivered, dups := s.count(all)
	r := result{Fault: fault, Path: "jetstream (embedded) disk", Sent: l.Sent(), Accepted: len(all), Refused: l.Refusals(),
		Delivered: delivered, Duplicates: dups, Lost: len(all) - delivered,
		IngressRecoveryS: l.FirstAcceptedAfter(freed).Seconds(), Note: "refusal while full: " + whileFull + "; last refusal: " + l.LastRefusal()}
	if l.Count(503, 507, 429) == 0 {
		t.Errorf("%s: ingress never refused (codes %v)", fault, l.Codes())
	}
	if l.NoRetryAfter() > 0 {
		t.Errorf("%s: %d refusals without Retry-After", fault, l.NoRetryAfter())
	}
	if r.Lost > 0 {
		t.Errorf("%s: %d accepted events lost", fault, r.Lost)
	}
	record(t, r)
	if r.IngressRecoveryS < 0 {
		t.Errorf("%s: ingress did not accept again within 10 s of freeing space, without a restart", fault)
	}
}

// TestDiskFull runs the embedded JetStream on a 32 MiB tmpfs. First the store reaches
// the limit the NATS server set itself at start (a share of the free space): ingress
// answers 503 "out of space", stored events keep delivering and ingress accepts again
// once they are consumed, without a restart. Then another file fills the filesystem.
//
// Then another file fills the filesystem: the server keeps a write error on the stream
// until JetStream is reloaded, which the embedded server does by itself once space is
// freed (channel/jetstream diskHeal); meanwhile ingress answers 503 saying the disk is
// full, and must accept again within 10 s of the space being freed, no restart.
// It takes about two minutes, so it runs in the long form only (SLUICE_FAULTS=long, make
// faults).
func TestDiskFull(t *testing.T) {
	if !long {
		t.Skip("about two minutes: SLUICE_FAULTS=long (make faults) runs it")
	}
	disk := smallDisk(t, 32<<20)
	s := newSink(t)
	cfg := writeConfig(t, brokerYAML("disk", retrying, [2]string{"sub", s.URL}))
	b := startSluice(t, "--config", cfg, "--channel", "jetstream", "--data-dir", filepath.Join(disk, "js"))
	url := b.base + "/disk/default"
	diskRun(t, "store limit reached", "out of space", s, url, func() {}, func() {})
	var filler string
	diskRun(t, "filesystem filled by another file", "disk under the embedded server's data directory", s, url,
		func() { filler = fillDisk(t, disk) },
		func() {
			if err := os.Remove(filler); err != nil {
				t.Error(err)
			}
		})
}
