package memory

import (
	"testing"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/channeltest"
)

func TestConformance(t *testing.T) {
	channeltest.Run(t, channeltest.Harness{
		Open: func(t *testing.T) channel.Channel { return New() },
		Limited: func(t *testing.T, limit int64) channel.Channel {
			return New(WithBudget(NewBudget(limit)))
		},
	})
}
