package workflowtest

import (
	"sync"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// watchers is the fake's TerminalWatcher. It has no connection to lose,
// so every terminal record stored wakes its order's waiters, while the
// write still holds the store's lock (the record is readable by the time
// a waiter reads), and nothing else wakes them.
type watchers struct {
	mu sync.Mutex
	m  map[string]map[*waiter]struct{}
}

type waiter struct{ wake chan struct{} }

// Watch implements readmodel.TerminalWatcher. It reads and writes no
// record.
func (r *ReadModel) Watch(orderID string) (<-chan struct{}, func()) {
	return r.watch.add(orderID)
}

// Watchers is how many waiters are registered, over all orders.
func (r *ReadModel) Watchers() int {
	r.watch.mu.Lock()
	defer r.watch.mu.Unlock()
	n := 0
	for _, set := range r.watch.m {
		n += len(set)
	}
	return n
}

func (w *watchers) add(orderID string) (<-chan struct{}, func()) {
	wt := &waiter{wake: make(chan struct{}, 1)}
	w.mu.Lock()
	if w.m == nil {
		w.m = map[string]map[*waiter]struct{}{}
	}
	if w.m[orderID] == nil {
		w.m[orderID] = map[*waiter]struct{}{}
	}
	w.m[orderID][wt] = struct{}{}
	w.mu.Unlock()
	var once sync.Once
	return wt.wake, func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			delete(w.m[orderID], wt)
			if len(w.m[orderID]) == 0 {
				delete(w.m, orderID)
			}
		})
	}
}

// stored is called with every record stored; a terminal one is announced.
func (w *watchers) stored(orderID string, state *contracts.OrderState) {
	if !readmodel.Terminal(state.GetStatus()) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for wt := range w.m[orderID] {
		select {
		case wt.wake <- struct{}{}:
		default:
		}
	}
}
