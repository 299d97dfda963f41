package commerce

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

// Config configures the Redis-backed CommerceStateStore.
type Config struct {
	// Client is required. A cluster client works: every multi-key script
	// touches keys of a single hash slot (see keys).
	Client redis.UniversalClient
	// Now is the clock of the stock ledger's movements; optional, default
	// time.Now. Scripts take the time as an argument and never read the
	// server's clock.
	Now func() time.Time
	// KeyPrefix namespaces every key; default DefaultKeyPrefix. It must not
	// contain '{' or '}', since the first braces of a key choose its
	// Redis Cluster slot and the layout relies on choosing them itself.
	KeyPrefix string
	// LedgerMaxLen caps each SKU's stock ledger: every movement's XADD
	// trims the stream to about this many entries (MAXLEN ~, which drops
	// whole stream nodes, so a ledger may run some 100 entries over).
	// 0 means DefaultLedgerMaxLen; negative keeps every movement, and the
	// ledger then grows with the SKU's traffic for good.
	LedgerMaxLen int64
	// SkipLegacyIdempotency stops reading the idempotency mappings of the
	// layout before the order's tag (P idem:{<key>}). Until then a start
	// whose mapping is missing reads the old key once, and a MarkStarted
	// that finds no mapping tries the old one: one command more for every
	// new start. Safe to set once every order started before the layout
	// changed is terminal and no client retries its key, or once their
	// old mappings are deleted (docs/contract.md, "Idempotency mapping").
	SkipLegacyIdempotency bool
}

// DefaultLedgerMaxLen is the stock ledger's default cap per SKU: enough
// for the stock endpoint's newest 500 and an operator's look back over a
// busy SKU's recent hours, without letting the ledger outgrow the stock
// it explains.
const DefaultLedgerMaxLen = 10_000

// Redis is the CommerceStateStore on Redis and is safe for concurrent
// use. Idempotency and Inventory both declare a Reserve method, so no one
// Go type can implement both; Redis hands out one view per interface
// instead (Idempotency, Carts, Inventory, Payment), all over the same
// client and keys. Each view, its scripts and its keys live in a file of
// its own (redis_<store>.go); each script touches only its view's keys.
type Redis struct {
	client redis.UniversalClient
	keys   keys
	now    func() time.Time
	// oneSlot: the client is a single server, so the one-script paths
	// (redis_oneslot.go) apply.
	oneSlot bool
	// legacy: read the idempotency mappings of the layout before the
	// order's tag when the new one is missing (!SkipLegacyIdempotency).
	legacy bool
	// ledgerMax is the last argument of every script that appends a
	// movement: the stream's approximate cap, 0 for none.
	ledgerMax int64
	// step, nil outside tests (export_test.go), is called after every
	// step of the reservation protocol; an error stops the call there as
	// a crash would.
	step func(step string) error
}

// The views embed *Redis for its client and keys.
type (
	idempotencyStore struct{ *Redis }
	cartStore        struct{ *Redis }
	inventoryStore   struct{ *Redis }
	paymentStore     struct{ *Redis }
)

var (
	_ Idempotency = idempotencyStore{}
	_ Carts       = cartStore{}
	_ Inventory   = inventoryStore{}
	_ StockLedger = inventoryStore{}
	_ Payment     = paymentStore{}
)

// Idempotency returns the IdempotencyKey → OrderId mapping.
func (r *Redis) Idempotency() Idempotency { return idempotencyStore{r} }

// Carts returns the cart snapshots.
func (r *Redis) Carts() Carts { return cartStore{r} }

// Inventory returns the seeded inventory module.
func (r *Redis) Inventory() Inventory { return inventoryStore{r} }

// Payment returns the seeded payment module.
func (r *Redis) Payment() Payment { return paymentStore{r} }

// Ledger returns the inventory's stock ledger.
func (r *Redis) Ledger() StockLedger { return inventoryStore{r} }

// NewRedis returns the store on cfg.Client, or an error wrapping ErrConfig
// when cfg has no client or a prefix with braces.
func NewRedis(cfg Config) (*Redis, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: Config.Client is nil", ErrConfig)
	}
	k, err := newKeys(cfg.KeyPrefix)
	if err != nil {
		return nil, err
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	_, oneSlot := cfg.Client.(*redis.Client)
	ledgerMax := cfg.LedgerMaxLen
	switch {
	case ledgerMax == 0:
		ledgerMax = DefaultLedgerMaxLen
	case ledgerMax < 0:
		ledgerMax = 0
	}
	return &Redis{client: cfg.Client, keys: k, now: now, oneSlot: oneSlot, legacy: !cfg.SkipLegacyIdempotency, ledgerMax: ledgerMax}, nil
}

// translate turns a go-redis error into this package's sentinels, so no
// caller ever needs to know the backing store.
func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("commerce: %s: %w", op, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		switch {
		case strings.HasPrefix(msg, "OOM"):
			// Refused whole under noeviction: nothing of the write applied.
			return fmt.Errorf("%w: %w: %s: %s", ErrUnavailable, errkind.StoreFull, op, msg)
		case strings.HasPrefix(msg, "WRONGTYPE"), strings.HasPrefix(msg, "CORRUPT"):
			return fmt.Errorf("%w: %s: %s", ErrCorrupt, op, msg)
		case strings.HasPrefix(msg, "LOADING"), strings.HasPrefix(msg, "READONLY"),
			strings.HasPrefix(msg, "MASTERDOWN"), strings.HasPrefix(msg, "CLUSTERDOWN"),
			strings.HasPrefix(msg, "TRYAGAIN"), strings.HasPrefix(msg, "BUSY"),
			// Only once the client's redirects ran out, while a failover
			// or a resharding moves the slot: the command did not run.
			strings.HasPrefix(msg, "MOVED "), strings.HasPrefix(msg, "ASK "):
			return fmt.Errorf("%w: %s: %s", ErrUnavailable, op, msg)
		default:
			return fmt.Errorf("commerce: %s: redis replied: %s", op, msg)
		}
	}
	return fmt.Errorf("%w: %s: %v", ErrUnavailable, op, err)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

func (r *Redis) counter(ctx context.Context, key, field string) (int64, error) {
	raw, err := r.client.HGet(ctx, key, field).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, translate("get call counter", err)
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s of %q is %q", ErrCorrupt, field, key, raw)
	}
	return n, nil
}
