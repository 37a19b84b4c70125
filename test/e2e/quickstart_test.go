package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/sluicetest"
	"github.com/sluice-broker/sluice/internal/syncbuf"
)

// qsCommand is one command of a quick-start step: the shell text as written (with
// continuation lines), and what the README says it prints or answers — a comment at the
// end of its line ("# 404: no broker…") or comment lines under it ("# ingest: URL").
type qsCommand struct {
	Shell  string
	Expect []string
}

// qsStep is one numbered step of the README's quick start: its prose, the commands of
// its ```sh blocks, and the commands quoted inline in its prose (`curl …`, `bin/sluice …`).
type qsStep struct {
	N        int
	Text     string
	Commands []qsCommand
	Inline   []string
}

var (
	stepStart     = regexp.MustCompile(`^(\d+)\. `)
	inlineCommand = regexp.MustCompile("`((?:curl|bin/sluice) [^`]+)`")
	trailingNote  = regexp.MustCompile(`\s+#\s+(.*)$`)
)

// parseQuickStart reads the "## Quick start" section of a README into its steps.
func parseQuickStart(readme string) ([]qsStep, error) {
	var steps []qsStep
	in, fence := false, false
	indent := ""
	var cont *qsCommand // the command a trailing backslash continues
	sc := bufio.NewScanner(strings.NewReader(readme))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			if in {
				break
			}
			in = strings.HasPrefix(line, "## Quick start")
			continue
		}
		if !in {
			continue
		}
		trimmed := strings.TrimSpace(line)
		if fence {
			if trimmed == "```" {
				fence = false
				continue
			}
			st := &steps[len(steps)-1]
			body := strings.TrimPrefix(line, indent)
			switch {
			case cont != nil:
				cont.Shell += "\n" + body
			case strings.HasPrefix(trimmed, "#"):
				if len(st.Commands) == 0 {
					return nil, fmt.Errorf("step %d: a comment before any command: %q", st.N, line)
				}
				c := &st.Commands[len(st.Commands)-1]
				c.Expect = append(c.Expect, strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
				continue
			case trimmed == "":
				continue
			default:
				st.Commands = append(st.Commands, qsCommand{Shell: body})
			}
			c := &st.Commands[len(st.Commands)-1]
			cont = nil
			if strings.HasSuffix(body, `\`) {
				cont = c
			} else if m := trailingNote.FindStringSubmatchIndex(c.Shell); m != nil {
				c.Expect = append(c.Expect, c.Shell[m[2]:m[3]])
				c.Shell = c.Shell[:m[0]]
			}
			continue
		}
		if m := stepStart.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			steps = append(steps, qsStep{N: n})
		}
		if len(steps) == 0 {
			continue
		}
		if trimmed == "```sh" {
			fence, indent = true, line[:strings.Index(line, "```")]
			continue
		}
		st := &steps[len(steps)-1]
		st.Text += line + "\n"
		for _, m := range inlineCommand.FindAllStringSubmatch(line, -1) {
			st.Inline = append(st.Inline, m[1])
		}
	}
	if len(steps) == 0 {
		return nil, errors.New(`README.md has no numbered steps under "## Quick start"`)
	}
	return steps, sc.Err()
}

func TestParseQuickStart(t *testing.T) {
	readme := "# x\n## Quick start (5 minutes)\n\n1. Start (terminal 1):\n\n   ```sh\n   make run\n   # ingest: http://h/\n   ```\n\n" +
		"2. Send, then `curl -s h/metrics | grep ^x` and `bin/sluice status`:\n\n   ```sh\n   curl -i h \\\n     -d x\n   curl h/nope   # 404: no broker\n   ```\n## Next\n3. not a step\n"
	steps, err := parseQuickStart(readme)
	if err != nil {
		t.Fatal(err)
	}
	want := []qsStep{
		{N: 1, Commands: []qsCommand{{Shell: "make run", Expect: []string{"ingest: http://h/"}}}},
		{N: 2, Commands: []qsCommand{{Shell: "curl -i h \\\n  -d x"}, {Shell: "curl h/nope", Expect: []string{"404: no broker"}}},
			Inline: []string{"curl -s h/metrics | grep ^x", "bin/sluice status"}},
	}
	if len(steps) != len(want) {
		t.Fatalf("%d steps, want %d: %+v", len(steps), len(want), steps)
	}
	for i, w := range want {
		g := steps[i]
		if g.N != w.N || fmt.Sprint(g.Commands) != fmt.Sprint(w.Commands) || fmt.Sprint(g.Inline) != fmt.Sprint(w.Inline) {
			t.Errorf("step %d:\n got %d %q %q\nwant %d %q %q", i, g.N, g.Commands, g.Inline, w.N, w.Commands, w.Inline)
		}
	}
}

// qsProc is a long-running command of the quick start (the broker, the receiver), in its
// own process group so that it and its children (make → sluice) end together, as a
// terminal's Ctrl-C ends them.
type qsProc struct {
	cmd    *exec.Cmd
	out    *syncbuf.Buffer
	exited chan error
}

func (p *qsProc) signal(sig syscall.Signal) { _ = syscall.Kill(-p.cmd.Process.Pid, sig) }

// stop sends sig to the group and waits for the process to end (then kills the group).
func (p *qsProc) stop(sig syscall.Signal, timeout time.Duration) (error, bool) {
	p.signal(sig)
	select {
	case err := <-p.exited:
		return err, true
	case <-time.After(timeout):
		p.signal(syscall.SIGKILL)
		return <-p.exited, false
	}
}

// TestQuickStart runs the README's quick start as written, step by step, from the repo
// root: make run and bin/sluice receive in the background, every curl with the status
// its comment (or the prose: 202) says, the metrics and status commands, then Ctrl-C to
// the receiver and the bench run (its --out moved to a temporary directory). The ports
// the README uses (8080, 9000) are replaced by free ones, since they may be taken on
// this machine: probing them would release them before make run binds them.
func TestQuickStart(t *testing.T) {
	for _, tool := range []string{"make", "curl", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the quick start needs %s, which is not installed: %v", tool, err)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	steps, err := parseQuickStart(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range steps {
		if st.N != i+1 {
			t.Fatalf("quick start step %d is numbered %d", i+1, st.N)
		}
	}

	// Ports: free ones in place of the README's.
	rewrite := func(s string) string { return s }
	extraMake, extraBench, extraStatus := "", "", ""
	for _, port := range []string{"8080", "9000"} {
		free := strings.TrimPrefix(freePort(t), "127.0.0.1:")
		t.Logf("the quick start runs with port %s in place of %s", free, port)
		prev := rewrite
		rewrite = func(s string) string { return strings.ReplaceAll(prev(s), "127.0.0.1:"+port, "127.0.0.1:"+free) }
		switch port {
		case "8080":
			extraMake += " ADDR=:" + free
			extraStatus = " --addr 127.0.0.1:" + free // status asks 127.0.0.1:8080 by default
		case "9000": // the demo's triggers deliver there, and bench's receiver listens there
			demo, err := os.ReadFile(filepath.Join(root, "examples/demo.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			cfg := filepath.Join(t.TempDir(), "demo.yaml")
			if err := os.WriteFile(cfg, []byte(strings.ReplaceAll(string(demo), "127.0.0.1:9000", "127.0.0.1:"+free)), 0o644); err != nil {
				t.Fatal(err)
			}
			extraMake += " CONFIG=" + cfg
			extraBench += " --receiver-addr 127.0.0.1:" + free
		}
	}
	ingest := rewrite("http://127.0.0.1:8080")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	shell := func(script string) *exec.Cmd {
		c := exec.CommandContext(ctx, "bash", "-c", script)
		c.Dir = root
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
		return c
	}
	background := map[int]*qsProc{}
	t.Cleanup(func() {
		for n, p := range background {
			if err, ok := p.stop(syscall.SIGTERM, 30*time.Second); !ok {
				t.Errorf("step %d's %q did not end within 30 s of SIGTERM (killed): %v", n, p.cmd.Args[2], err)
			}
		}
	})
	start := func(n int, script string) *qsProc {
		c := shell(script)
		p := &qsProc{cmd: c, out: &syncbuf.Buffer{}, exited: make(chan error, 1)}
		c.Stdout, c.Stderr = p.out, p.out
		if err := c.Start(); err != nil {
			t.Fatalf("step %d: %s: %v", n, script, err)
		}
		go func() { p.exited <- c.Wait() }()
		background[n] = p
		return p
	}
	// run runs a foreground command and returns its output, failing on a non-zero exit.
	run := func(n int, script string) string {
		t.Helper()
		c := shell(script)
		var stderr syncbuf.Buffer
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil {
			t.Fatalf("step %d: %s: %v\n%s%s", n, script, err, out, stderr.String())
		}
		return string(out)
	}

	stopReceiver := regexp.MustCompile(`stop the receiver of step (\d+)`)
	accepted := 0 // the curl commands the README says are answered 202: events the receiver gets
	for _, st := range steps {
		for _, c := range st.Commands {
			script := rewrite(c.Shell)
			t.Logf("step %d: %s", st.N, script)
			switch {
			case strings.HasPrefix(script, "make run"): // terminal 1: the broker
				if extraMake != "" {
					t.Logf("step %d: runs as %s", st.N, script+extraMake)
				}
				p := start(st.N, script+extraMake)
				waitFor := []string{}
				for _, e := range c.Expect {
					waitFor = append(waitFor, rewrite(e))
				}
				deadline := time.Now().Add(3 * time.Minute) // a cold build on a busy machine
				for !containsAll(p.out.String(), waitFor) {
					select {
					case err := <-p.exited:
						t.Fatalf("step %d: %s exited: %v\n%s", st.N, script, err, p.out)
					case <-time.After(100 * time.Millisecond):
					}
					if time.Now().After(deadline) {
						t.Fatalf("step %d: %s did not print %q within 3 minutes:\n%s", st.N, script, waitFor, p.out)
					}
				}
				if err := sluicetest.WaitReady(ingest, 30*time.Second); err != nil {
					t.Fatalf("step %d: %v\n%s", st.N, err, p.out)
				}
			case strings.HasPrefix(script, "bin/sluice receive"): // terminal 2: the subscriber
				start(st.N, script)
				addr := regexp.MustCompile(`--addr (\S+)`).FindStringSubmatch(script)
				if addr == nil {
					t.Fatalf("step %d: %s: no --addr", st.N, script)
				}
				sluicetest.Eventually(t, 30*time.Second, "the receiver to listen on "+addr[1], func() bool {
					conn, err := net.Dial("tcp", addr[1])
					if err == nil {
						conn.Close()
					}
					return err == nil
				})
			case strings.HasPrefix(script, "curl -i"):
				if checkCurl(t, st.N, script, run(st.N, script), c.Expect) == http.StatusAccepted {
					accepted++
				}
			case strings.HasPrefix(script, "bin/sluice bench"):
				if m := stopReceiver.FindStringSubmatch(st.Text); m != nil {
					n, _ := strconv.Atoi(m[1])
					p := background[n]
					if p == nil {
						t.Fatalf("step %d says to stop the receiver of step %s, which started none", st.N, m[1])
					}
					t.Logf("step %d: Ctrl-C to step %d's receiver", st.N, n)
					err, ok := p.stop(syscall.SIGINT, 30*time.Second)
					delete(background, n)
					if !ok || err != nil {
						t.Fatalf("step %d: the receiver of step %d after Ctrl-C: ended %v, %v\n%s", st.N, n, ok, err, p.out)
					}
					// It got the events of the accepted curl commands.
					if !regexp.MustCompile(fmt.Sprintf(`(?m)^Events\s+\[received.*\]\s+%d,`, accepted)).MatchString(p.out.String()) {
						t.Errorf("step %d: the receiver's report does not count the %d events the README's curl commands sent:\n%s", st.N, accepted, p.out)
					}
				}
				out := t.TempDir()
				script = regexp.MustCompile(`--out \S+`).ReplaceAllString(script, "--out "+out) + extraBench
				t.Logf("step %d: runs as %s", st.N, script)
				got := run(st.N, script+" --quiet")
				for _, f := range []string{"summary.txt", "results.json", "seconds.csv", "index.html"} {
					if _, err := os.Stat(filepath.Join(out, f)); err != nil {
						t.Errorf("step %d: %v\n%s", st.N, err, got)
					}
				}
			default:
				t.Fatalf("step %d: the test does not know how to run %q: teach it", st.N, script)
			}
		}
		for _, c := range st.Inline {
			script := rewrite(c)
			if strings.HasPrefix(script, "bin/sluice status") && extraStatus != "" {
				script += extraStatus
			}
			t.Logf("step %d: %s", st.N, script)
			out := run(st.N, script)
			switch {
			case strings.Contains(script, "/metrics"):
				if !strings.Contains(out, "sluice_") {
					t.Errorf("step %d: %s printed no sluice_ metric:\n%s", st.N, script, out)
				}
			case strings.HasPrefix(script, "bin/sluice status"):
				if !regexp.MustCompile(`(?m)^Broker\s+default\s+default\s+True`).MatchString(out) {
					t.Errorf("step %d: %s does not list broker default/default:\n%s", st.N, script, out)
				}
			}
		}
	}
	if len(background) == 0 || background[1] == nil {
		t.Fatal("the quick start started no broker")
	}
	if err, ok := background[1].stop(syscall.SIGINT, 30*time.Second); !ok {
		t.Errorf("make run did not end within 30 s of Ctrl-C: %v", err)
	}
	delete(background, 1)
}

// checkCurl checks a `curl -i` answer: the status of the README's comment ("# 404: no
// broker…" or "# 405, Allow: POST, OPTIONS"), whose text must appear in the body or
// headers, or 202 for a send without a comment. It returns the status it wanted.
func checkCurl(t *testing.T, step int, script, out string, expect []string) int {
	t.Helper()
	status, rest := 0, out
	if m := regexp.MustCompile(`(?m)^HTTP/[\d.]+ (\d{3})`).FindStringSubmatch(out); m != nil {
		status, _ = strconv.Atoi(m[1])
	}
	want, text := http.StatusAccepted, ""
	for _, e := range expect {
		if m := regexp.MustCompile(`^(\d{3})[:,]?\s*(.*)$`).FindStringSubmatch(e); m != nil {
			want, _ = strconv.Atoi(m[1])
			text = m[2]
		}
	}
	if status != want {
		t.Errorf("step %d: %s answered %d, the README says %d:\n%s", step, script, status, want, out)
	}
	if text != "" && !strings.Contains(rest, text) {
		t.Errorf("step %d: %s: the answer does not say %q:\n%s", step, script, text, out)
	}
	return want
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
