package broker

import "sync"

// retirements owns the goroutines that retire what a reload removed (a broker's
// triggers, or the server's brokers): each delivers what is queued, then frees its
// queues. Their owner waits for them with wait, which also collects what those still
// running when it was called left undelivered; the others logged their own count.
type retirements struct {
	wg      sync.WaitGroup
	mu      sync.Mutex
	waiting bool // wait was called
	left    int  // undelivered, by retirements that ended after wait was called
}

// start runs retire in a goroutine owned by r.
func (r *retirements) start(retire func() (left int)) {
	r.wg.Go(func() {
		n := retire()
		r.mu.Lock()
		if r.waiting {
			r.left += n
		}
		r.mu.Unlock()
	})
}

// wait waits for every retirement and returns what those that ended after the call began
// left undelivered. Call it once no more can start.
func (r *retirements) wait() int {
	r.mu.Lock()
	r.waiting = true
	r.mu.Unlock()
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.left
}
