package kubetest

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
)

// mainTB is the testing.TB that Kubernetes' test server wants, for a server started in
// TestMain, where there is no test: logs go to a writer, failures are recorded, FailNow
// ends the calling goroutine (Start runs the test server in a goroutine of its own), and
// cleanups run at Stop.
type mainTB struct {
	dir  string
	logs io.Writer

	mu       sync.Mutex
	failures []string
	failed   bool
	cleanups []func()
}

func newMainTB(dir string, logs io.Writer) *mainTB { return &mainTB{dir: dir, logs: logs} }

func (t *mainTB) Attr(key, value string) {}
func (t *mainTB) Chdir(dir string)       { panic("kubetest: Chdir is not supported") }
func (t *mainTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}
func (t *mainTB) Error(args ...any) { t.fail(fmt.Sprint(args...)) }
func (t *mainTB) Errorf(format string, args ...any) {
	t.fail(fmt.Sprintf(format, args...))
}
func (t *mainTB) Fail() { t.fail("") }
func (t *mainTB) FailNow() {
	t.fail("")
	runtime.Goexit()
}
func (t *mainTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}
func (t *mainTB) Fatal(args ...any) {
	t.fail(fmt.Sprint(args...))
	runtime.Goexit()
}
func (t *mainTB) Fatalf(format string, args ...any) {
	t.fail(fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (t *mainTB) Helper()         {}
func (t *mainTB) Log(args ...any) { fmt.Fprintln(t.logs, args...) }
func (t *mainTB) Logf(format string, args ...any) {
	fmt.Fprintf(t.logs, format+"\n", args...)
}
func (t *mainTB) Name() string { return "kubetest" }
func (t *mainTB) Setenv(key, value string) {
	old, had := os.LookupEnv(key)
	os.Setenv(key, value)
	t.Cleanup(func() {
		if had {
			os.Setenv(key, old)
		} else {
			os.Unsetenv(key)
		}
	})
}
func (t *mainTB) Skip(args ...any)                 { t.Fatal(args...) }
func (t *mainTB) Skipf(format string, args ...any) { t.Fatalf(format, args...) }
func (t *mainTB) SkipNow()                         { t.FailNow() }
func (t *mainTB) Skipped() bool                    { return false }
func (t *mainTB) TempDir() string {
	if err := os.MkdirAll(t.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	d, err := os.MkdirTemp(t.dir, "")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (t *mainTB) fail(msg string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed = true
	if msg != "" {
		t.failures = append(t.failures, msg)
		fmt.Fprintln(t.logs, "FAIL:", msg)
	}
}

// failure is what failed, for the error of Start.
func (t *mainTB) failure() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.failures) == 0 {
		return "(no message)"
	}
	return strings.Join(t.failures, "; ")
}

// cleanup runs the cleanups, last first.
func (t *mainTB) cleanup() {
	t.mu.Lock()
	cs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}
