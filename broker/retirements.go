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

// claim makes every retirement that ends from now on add what it left to wait's count
// instead of only logging it. Shutdown claims before its deadline can end a retirement,
// so that none ends uncounted between the deadline and the call to wait.
func (r *retirements) claim() {
	r.mu.Lock()
	r.waiting = true
	r.mu.Unlock()
}

// wait waits for every retirement and returns what those that ended after claim (or this
// call) left undelivered. Call it once no more can start.
func (r *retirements) wait() int {
	r.claim()
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.left
}
