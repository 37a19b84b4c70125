package broker

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/redact"
)

// headerEncoding is the ce- header encoding toward the subscribers of the broker bc
// (the sluice.dev/header-encoding annotation).
func headerEncoding(bc config.Broker) event.HeaderEncoding {
	if bc.HeaderEncoding == config.HeaderEncodingPercent {
		return event.HeaderPercent
	}
	return event.HeaderMinimal
}

// ExtArrivalTime is the extension Knative's broker ingress sets on every event it
// accepts: when it arrived, RFC 3339 in UTC. Sluice's is to the millisecond.
const ExtArrivalTime = "knativearrivaltime"

// arrivalClock formats arrival times. Events arriving within the same millisecond share
// one formatted string, so stamping costs an atomic load on the hot path (ingress passes
// the clock reading it took for the request, at), and a format (one small allocation)
// once per millisecond at most.
type arrivalClock struct {
	last atomic.Pointer[arrivalStamp]
}

type arrivalStamp struct {
	ms int64
	s  string
}

// now returns the current time as a knativearrivaltime value.
func (c *arrivalClock) now() string { return c.at(time.Now()) }

// at returns t, a time.Now reading, as a knativearrivaltime value.
func (c *arrivalClock) at(t time.Time) string {
	ms := t.UnixMilli()
	if p := c.last.Load(); p != nil && p.ms == ms {
		return p.s
	}
	s := t.UTC().Truncate(time.Millisecond).Format("2006-01-02T15:04:05.000Z07:00")
	c.last.Store(&arrivalStamp{ms: ms, s: s})
	return s
}

// applied is the configuration Apply last made running, with the brokers and channels
// whose channel could not be opened or whose triggers could not start.
type applied struct {
	cfg    *config.Config
	failed map[string]error // by broker key "ns/name"
}

// Status returns every object of the running configuration with its status, as `sluice
// validate` shows a file: the load's verdict (config.Config.Objects), with what failed
// at run time on top — a Broker or channel whose channel did not open or cannot store
// events now (its backend unreachable), and the Triggers, Subscriptions, Sequences and
// Parallels that depend on it, are not ready.
// It is nil before the first Apply.
func (s *Server) Status() []config.ObjectStatus {
	a := s.applied.Load()
	if a == nil {
		return nil
	}
	out := RedactObjects(a.cfg.Objects)
	// What failed at Apply, and the channels that cannot store now (health.go): the
	// same reason ingress's 503 gives, with the backend's own error for the operator.
	failed := a.failed
	if down := s.notStoring(); len(down) > 0 {
		failed = make(map[string]error, len(a.failed)+len(down))
		for k, err := range down {
			failed[k] = fmt.Errorf("cannot store events: %w", err)
		}
		for k, err := range a.failed {
			failed[k] = err
		}
	}
	if len(failed) == 0 {
		return out
	}
	// Which broker each subscription and flow runs on.
	on := map[string][]string{} // "Kind ns/name" → broker keys
	for _, b := range a.cfg.Brokers {
		if b.Owner != "" {
			on[b.Owner] = append(on[b.Owner], b.Key())
			continue
		}
		on[b.Kind+" "+b.Key()] = append(on[b.Kind+" "+b.Key()], b.Key())
		for _, t := range b.Triggers {
			on[t.Kind+" "+t.Key()] = append(on[t.Kind+" "+t.Key()], b.Key())
		}
	}
	for i, o := range out {
		if len(o.FlowChannels) > 0 { // which of a flow's channels are not running
			chs := slices.Clone(o.FlowChannels)
			for j, ch := range chs {
				if err, bad := failed[o.Namespace+"/"+ch.Name]; bad {
					chs[j].Ready, chs[j].Reason = false, "not running: "+redact.Text(err.Error())
				}
			}
			out[i].FlowChannels = chs
		}
		if !o.Ready {
			continue
		}
		for _, bk := range on[o.Key()] {
			if err, bad := failed[bk]; bad {
				out[i].Ready = false
				msg := redact.Text(err.Error())
				if bk == o.Namespace+"/"+o.Name {
					out[i].Reason = "not running: " + msg
				} else {
					out[i].Reason = "its channel " + bk + " is not running: " + msg
				}
				break
			}
		}
	}
	return out
}

// RedactObjects returns a copy of objs whose addresses and resolved URLs show no
// credentials (redact.URL): what GET /status, sluice status and sluice validate show.
// The running configuration keeps the real URLs.
func RedactObjects(objs []config.ObjectStatus) []config.ObjectStatus {
	out := append([]config.ObjectStatus(nil), objs...)
	for i := range out {
		out[i].Address = redact.URL(out[i].Address)
		out[i].Reason = redact.Text(out[i].Reason) // it may quote a uri
		if len(out[i].Refs) == 0 {
			continue
		}
		refs := append([]config.Resolution(nil), out[i].Refs...)
		for j := range refs {
			refs[j].URL = redact.URL(refs[j].URL)
		}
		out[i].Refs = refs
	}
	return out
}

// serveStatus answers GET /status: {"ready": bool, "objects": [...]} (Status).
func (s *Server) serveStatus(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, r.Method+" is not allowed; GET the status", http.StatusMethodNotAllowed)
		return
	}
	objs := s.Status()
	ready := objs != nil
	for _, o := range objs {
		if !o.Ready && !o.Skipped {
			ready = false
		}
	}
	if objs == nil {
		objs = []config.ObjectStatus{}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(StatusReport{Ready: ready, Objects: objs})
}

// StatusReport is the body of GET /status.
type StatusReport struct {
	// Ready is true when every object Sluice runs is ready.
	Ready bool `json:"ready"`
	// Objects are the objects of the running configuration, in file order.
	Objects []config.ObjectStatus `json:"objects"`
}

// keepChannelSettings keeps the settings a running broker's channel was opened with
// (config.Broker.Settings: its Kafka cluster, topic, partitions and replication, its
// Kinesis stream...) in bc, and says which a reload tried to change, by the field they
// were written in: they take effect on a restart, like a change of backend.
func keepChannelSettings(bc *config.Broker, running config.Broker) error {
	var changed []string
	for _, k := range slices.Sorted(maps.Keys(bc.Settings)) {
		if v, ok := running.Settings[k]; !ok || v != bc.Settings[k] {
			changed = append(changed, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(running.Settings)) {
		if _, ok := bc.Settings[k]; !ok {
			changed = append(changed, k)
		}
	}
	if len(changed) == 0 {
		return nil
	}
	slices.Sort(changed)
	bc.Settings = running.Settings
	return fmt.Errorf("changing the channel's %s needs a restart; keeping the running ones", strings.Join(changed, ", "))
}
