package takeover

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
)

// PolicyConfig configures a Policy.
type PolicyConfig struct {
	Service *Service
	// After is how long an owner must have been recorded gone before its
	// orders are taken over; it must be positive.
	After time.Duration
	// Caller names the policy in operation records.
	Caller string
	// AttemptTimeout bounds one look at an order (reads and takeover);
	// default 10s.
	AttemptTimeout time.Duration
	Logger         *slog.Logger
}

// Policy is the opt-in -takeover-after policy. It never answers a command:
// the command that found the owner gone has already ended Unavailable, as
// the spec says. Told of such a command (OwnerGone), it takes the order
// over in the background once the owner's gone record is older than
// After, so that a new attempt activates the order on a live member.
//
// It acts only on the Location Store's gone record, never on this
// process's own view of the topology: the record is what every process
// agrees on, and its time is when the owner was first seen to leave.
// The risk it takes is the one a takeover takes, without an operator's
// judgement: a member recorded gone that is in fact alive (paused, cut
// off) is fenced off from its orders; no write of it is accepted, but its
// in-flight work is lost and redone by the new owner.
type Policy struct {
	cfg  PolicyConfig
	log  *slog.Logger
	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	pending map[string]bool // orders with a look under way or scheduled
}

// NewPolicy returns a running Policy; Close stops it.
func NewPolicy(cfg PolicyConfig) (*Policy, error) {
	if cfg.Service == nil || cfg.After <= 0 {
		return nil, errors.Join(ErrInvalidArgument, errors.New("takeover policy needs a Service and a positive After"))
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = cfg.Service.log
	}
	return &Policy{cfg: cfg, log: cfg.Logger, stop: make(chan struct{}), pending: map[string]bool{}}, nil
}

// OwnerGone tells the policy that a command for orderID ended Unavailable
// because its owner is gone. It returns at once; repeated calls for an
// order already looked at are dropped.
func (p *Policy) OwnerGone(orderID string) {
	if checkID("orderId", orderID) != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.pending[orderID] {
		return
	}
	p.pending[orderID] = true
	p.wg.Add(1)
	go p.run(orderID)
}

// Close stops scheduled takeovers and waits for those under way.
func (p *Policy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.stop)
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Policy) run(orderID string) {
	defer func() {
		p.mu.Lock()
		delete(p.pending, orderID)
		p.mu.Unlock()
		p.wg.Done()
	}()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.AttemptTimeout)
		wait, err := p.try(ctx, orderID)
		cancel()
		if err != nil {
			// The next command that finds the owner gone tries again.
			p.log.Warn("takeover policy: attempt failed", slog.String("order", orderID), slog.Any("error", err))
			return
		}
		if wait <= 0 {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-p.stop:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// try takes the order over when its owner's gone record is old enough,
// or returns how long until it is. Zero and no error: nothing to do.
func (p *Policy) try(ctx context.Context, orderID string) (time.Duration, error) {
	s := p.cfg.Service
	rec, err := s.cfg.Location.Get(ctx, s.cfg.Kind, orderID)
	if err != nil {
		return 0, err
	}
	if rec.Status != location.Ready && rec.Status != location.Moving {
		return 0, nil
	}
	g, gone, err := s.cfg.Location.IsGone(ctx, rec.Owner)
	if err != nil || !gone {
		return 0, err
	}
	if age := s.cfg.Now().Sub(time.UnixMilli(g.LeftAtUnixMs)); age < p.cfg.After {
		return p.cfg.After - age, nil
	}
	// Only the owner the record named when the policy looked; a repeat by
	// another API process converges on the same default operation id.
	res, err := s.order(ctx, Request{OrderID: orderID, Caller: p.cfg.Caller}, map[string]string{rec.Owner: g.Node})
	if errors.Is(err, ErrNoOwner) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	p.log.Info("takeover policy: order taken over", slog.String("order", orderID), slog.String("operation", res.OperationID),
		slog.String("member", res.Member), slog.String("node", res.Node), slog.Duration("goneFor", s.cfg.Now().Sub(time.UnixMilli(g.LeftAtUnixMs)).Round(time.Millisecond)),
		slog.Int64("oldGeneration", res.OldGeneration), slog.Int64("newGeneration", res.NewGeneration), slog.String("outcome", string(res.Outcome)))
	return 0, nil
}
