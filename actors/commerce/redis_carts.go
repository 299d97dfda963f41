package commerce

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The Carts store on Redis: one JSON string per cart.

// GetCart implements Carts.
func (r cartStore) GetCart(ctx context.Context, cartID string) (Cart, error) {
	if cartID == "" {
		return Cart{}, invalid("cartId is empty")
	}
	b, err := r.client.Get(ctx, r.keys.cart(cartID)).Bytes()
	if errors.Is(err, redis.Nil) {
		return Cart{}, fmt.Errorf("%w: cart %q", ErrNotFound, cartID)
	}
	if err != nil {
		return Cart{}, translate("get cart", err)
	}
	var c Cart
	if err := json.Unmarshal(b, &c); err != nil {
		return Cart{}, fmt.Errorf("%w: cart %q: %v", ErrCorrupt, cartID, err)
	}
	if c.CartID != cartID {
		return Cart{}, fmt.Errorf("%w: cart key %q holds cart %q", ErrCorrupt, cartID, c.CartID)
	}
	return c, nil
}

// PutCart implements Carts. The snapshot is validated as a seed cart is.
func (r cartStore) PutCart(ctx context.Context, cart Cart) error {
	if err := validateCart(cart); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	b, err := json.Marshal(cart)
	if err != nil {
		return fmt.Errorf("%w: cart %q: %v", ErrInvalidArgument, cart.CartID, err)
	}
	return translate("put cart", r.client.Set(ctx, r.keys.cart(cart.CartID), b, 0).Err())
}
