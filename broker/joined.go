package broker

import "github.com/sluice-broker/sluice/channel"

// notJoined returns the name of a running trigger whose consumer has not joined its
// subscription yet (channel.Joiner), or "" when every one has: /readyz answers 503
// until then, so a replica counts as ready only once it takes its share of each trigger.
func (s *Server) notJoined() string {
	for _, b := range *s.brokers.Load() {
		for _, t := range b.triggerList() {
			if j, ok := t.consumer.(channel.Joiner); ok && !j.Joined() {
				return t.key
			}
		}
	}
	return ""
}
