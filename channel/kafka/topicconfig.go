package kafka

import "strconv"

// topicConfigs is the configuration of a topic this package creates: what the options
// set, nil when they leave everything to the cluster.
func (c *config) topicConfigs() map[string]*string {
	if c.minInsync == 0 {
		return nil
	}
	v := strconv.Itoa(int(c.minInsync))
	return map[string]*string{"min.insync.replicas": &v}
}
