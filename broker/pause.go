package broker

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/sluice-broker/sluice/delivery"
)

// errNoTrigger is the answer for a trigger the running configuration does not have.
var errNoTrigger = errors.New("no such trigger or subscription")

// TriggersPath is the prefix of the operator endpoints of triggers:
//
//	POST /triggers/<namespace>/<name>/pause   stop its deliveries (events keep being stored)
//	POST /triggers/<namespace>/<name>/resume  deliver again, what was stored meanwhile first
//	GET  /triggers/<namespace>/<name>         whether it is paused
//
// Each answers 200 with a TriggerState, 404 for an unknown trigger. Like /status, they
// are behind --ops-token-file when it is set; without it (WithOpsGuarded false) pause
// and resume answer 403, and only GET is served.
const TriggersPath = "/triggers/"

// TriggerState is the body of an answer of the TriggersPath endpoints.
type TriggerState struct {
	// Trigger is "namespace/name".
	Trigger string `json:"trigger"`
	// Paused is true while the trigger delivers nothing.
	Paused bool `json:"paused"`
	// PausedBy says what holds it paused: "annotation" (sluice.dev/paused), "api"
	// (POST .../pause, on a durable channel for every replica), or both. It is paused
	// while either does.
	PausedBy []string `json:"pausedBy,omitempty"`
}

// IsTriggerPath reports whether path is one of TriggersPath's endpoints rather than
// the ingress of a broker of namespace "triggers" (/triggers/<name>, with or without a
// trailing slash): the paths an operator token guards.
func IsTriggerPath(path string) bool {
	rest, ok := strings.CutPrefix(path, TriggersPath)
	if !ok {
		return false
	}
	n := strings.Count(rest, "/")
	return n >= 2 || n == 1 && !strings.HasSuffix(rest, "/")
}

// setPaused pauses (paused true) or resumes d: paused, it delivers nothing while its
// events keep being stored. Callers pass the trigger's whole state: its
// sluice.dev/paused annotation or its API pause (pausestate.go).
func setPaused(d *delivery.Dispatcher, paused bool) {
	if paused {
		d.Pause()
	} else {
		d.Resume()
	}
}

// findTrigger returns the running trigger or subscription key ("namespace/name"), or
// nil.
func (s *Server) findTrigger(key string) *trigger {
	for _, b := range s.snapshot() {
		b.mu.Lock()
		t := b.triggers[key]
		b.mu.Unlock()
		if t != nil {
			return t
		}
	}
	return nil
}

// serveTrigger answers the TriggersPath endpoints.
func (s *Server) serveTrigger(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, TriggersPath), "/")
	if len(parts) == 3 && parts[2] == "replay" {
		s.serveReplay(w, r, parts[0], parts[1]) // replay.go
		return
	}
	if len(parts) >= 3 && parts[2] == "dlq" {
		s.serveDLQ(w, r, parts) // dlq.go
		return
	}
	var action string
	switch {
	case len(parts) == 2 && r.Method == http.MethodGet:
	case len(parts) == 3 && (parts[2] == "pause" || parts[2] == "resume") && r.Method == http.MethodPost:
		action = parts[2]
	case len(parts) == 3 && (parts[2] == "pause" || parts[2] == "resume"):
		w.Header().Set("Allow", "POST")
		http.Error(w, r.Method+" is not allowed; POST to "+parts[2]+" a trigger", http.StatusMethodNotAllowed)
		return
	case len(parts) == 2:
		w.Header().Set("Allow", "GET")
		http.Error(w, r.Method+" is not allowed; GET a trigger's state", http.StatusMethodNotAllowed)
		return
	default:
		http.Error(w, "want "+TriggersPath+"<namespace>/<name>[/pause|/resume]", http.StatusNotFound)
		return
	}
	if action != "" && !s.opts.opsGuarded {
		http.Error(w, action+" is off: this server has no operator token; start it with --ops-token-file to "+action+" triggers", http.StatusForbidden)
		return
	}
	key := parts[0] + "/" + parts[1]
	b, t := s.findTriggerBroker(key) // pausestate.go
	if t == nil || parts[0] == "" || parts[1] == "" {
		http.Error(w, "trigger "+key+": "+errNoTrigger.Error(), http.StatusNotFound)
		return
	}
	if action != "" {
		if err := b.pauseByAPI(r.Context(), key, action == "pause"); err != nil {
			http.Error(w, "trigger "+key+": "+action+" not done: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		s.log.Info("trigger "+action+"d through the operator API", "trigger", key, "remote", r.RemoteAddr)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(b.triggerState(t))
}
