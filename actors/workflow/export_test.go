package workflow

import "github.com/shoppingmall-go/shoppingmall/actors/order"

// SetStateForTest replaces an order's fold, so tests can reach states the
// domain never produces (the repeated-effect guard).
func SetStateForTest(o *Order, st order.State) { o.state = st }
