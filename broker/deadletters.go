package broker

import "github.com/sluice-broker/sluice/delivery"

// WithDeadLetterHook calls h, on the delivering goroutine, for every event a trigger
// dead-lettered or could deliver nowhere; the dashboard (GET /ui) lists the last ones.
// h must return at once. Default: nil, none.
func WithDeadLetterHook(h delivery.DeadLetterHook) Option {
	return func(o *options) { o.deadLetters = h }
}
