package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/sluice-broker/sluice/broker"
	"github.com/sluice-broker/sluice/config"
)

// printObjects writes objects the way `kubectl get` lists them: one line each with
// READY and REASON, in format "table", "wide" (with the channel, the address and the
// resolved destinations) or "json" (broker.StatusReport, the body of GET /status).
func printObjects(w io.Writer, objs []config.ObjectStatus, format string) error {
	objs = broker.RedactObjects(objs) // no credential of a URL is printed
	ready := true
	for _, o := range objs {
		if !o.Ready && !o.Skipped {
			ready = false
		}
	}
	switch format {
	case "json":
		if objs == nil {
			objs = []config.ObjectStatus{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(broker.StatusReport{Ready: ready, Objects: objs})
	case "table", "wide":
	default:
		return fmt.Errorf("--output %q: want table, wide or json", format)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	head := "KIND\tNAMESPACE\tNAME\tREADY\tREASON"
	if format == "wide" {
		head += "\tCHANNEL\tADDRESS\tREFS"
	}
	fmt.Fprintln(tw, head)
	for _, o := range objs {
		state := "True"
		switch {
		case o.Skipped:
			state = "Skipped"
		case !o.Ready:
			state = "False"
		}
		name := o.Name
		if name == "" {
			name = fmt.Sprintf("(%s document %d)", o.File, o.Document)
		}
		kind := o.Kind
		if kind == "" {
			kind = "?"
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s", kind, o.Namespace, name, state, oneLineReason(o.Reason))
		if format == "wide" {
			var refs []string
			for _, r := range o.Refs {
				refs = append(refs, r.Field+"="+r.URL)
			}
			ch := o.Channel
			if ch == "" && o.Address != "" {
				ch = "(--channel)"
			}
			line += fmt.Sprintf("\t%s\t%s\t%s", ch, o.Address, strings.Join(refs, " "))
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

func oneLineReason(s string) string { return strings.ReplaceAll(s, "\n", " ") }
