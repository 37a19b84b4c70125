package kafka

import "strconv"

// topicConfigs is the configuration of a topic this package creates with replication
// factor rf (-1: the cluster's default): WithMinInsyncReplicas when set; otherwise
// min.insync.replicas=2 for a topic of 3 or more replicas, so that with acks=all losing
// one broker loses no acknowledged event; retention.ms when WithRetention is set; nil when everything is left to
// the cluster.
func (c *config) topicConfigs(rf int16) map[string]*string {
	out := c.insyncConfig(rf)
	if c.retention > 0 {
		if out == nil {
			out = map[string]*string{}
		}
		v := retentionMs(c.retention)
		out["retention.ms"] = &v
	}
	return out
}

// insyncConfig is the min.insync.replicas part of topicConfigs.
func (c *config) insyncConfig(rf int16) map[string]*string {
	switch {
	case c.minInsync > 0:
		v := strconv.Itoa(int(c.minInsync))
		return map[string]*string{"min.insync.replicas": &v}
	case rf >= 3:
		v := minInSyncReplicas
		return map[string]*string{"min.insync.replicas": &v}
	}
	return nil
}
