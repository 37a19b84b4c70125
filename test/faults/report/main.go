// Command report turns the JSON lines the fault tests append to $SLUICE_FAULTS_OUT into
// the Markdown table of docs/reliability/README.md (make faults runs it).
//
//	go run ./test/faults/report -in results.jsonl -out docs/reliability/README.md -title "..."
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
)

// result is one scenario, as test/faults records it.
type result struct {
	Fault            string  `json:"fault"`
	Path             string  `json:"path"`
	Sent             int     `json:"sent"`
	Accepted         int     `json:"accepted"`
	Refused          string  `json:"refused"`
	Delivered        int     `json:"delivered"`
	Duplicates       int     `json:"duplicates"`
	Lost             int     `json:"lost"`
	RecoveryS        float64 `json:"recovery_s"`
	IngressRecoveryS float64 `json:"ingress_recovery_s"`
	Note             string  `json:"note"`
}

func main() {
	in := flag.String("in", "", "JSON lines written by the fault tests (SLUICE_FAULTS_OUT)")
	out := flag.String("out", "", "Markdown file to write")
	title := flag.String("title", "Fault injection results", "heading of the page")
	intro := flag.String("intro", "", "paragraph under the heading (how the run was made)")
	flag.Parse()
	if err := run(*in, *out, *title, *intro); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(in, out, title, intro string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	var rs []result
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return fmt.Errorf("%s: %w", in, err)
		}
		rs = append(rs, r)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", title)
	if intro != "" {
		fmt.Fprintf(&b, "%s\n\n", intro)
	}
	b.WriteString("Columns: see [../reliability.md](../reliability.md). *backlog*: fault removed (engine back) → every event accepted before it delivered; *ingress*: → the next 202.\n\n")
	b.WriteString("| path | fault | sent | accepted | refused | delivered | duplicates | lost | backlog s | ingress s | notes |\n")
	b.WriteString("| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, r := range rs {
		refused := r.Refused
		if refused == "" {
			refused = "—"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %d | %d | %d | %.2f | %.2f | %s |\n", r.Path, r.Fault, r.Sent, r.Accepted,
			refused, r.Delivered, r.Duplicates, r.Lost, r.RecoveryS, r.IngressRecoveryS, strings.ReplaceAll(r.Note, "|", "/"))
	}
	return os.WriteFile(out, []byte(b.String()), 0o644)
}
