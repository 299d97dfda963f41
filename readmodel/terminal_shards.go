package readmodel

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// OrderChannel is the shard channel on which the store under key prefix
// (empty: DefaultKeyPrefix) announces orderID's terminal record
// (SPUBLISH): the prefix, "terminal:", then the order id as the hash tag,
// so that the channel is in the order's slot and the write's script can
// publish on it on a Redis Cluster too. Channels are not keys, so it
// shares the prefix without meeting a record.
func OrderChannel(prefix, orderID string) string {
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	return prefix + terminalChannelSuffix + ":{" + orderID + "}"
}

// orderOfChannel is OrderChannel's order id.
func orderOfChannel(prefix, channel string) (string, bool) {
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	rest, ok := strings.CutPrefix(channel, prefix+terminalChannelSuffix+":{")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "}")
}

// shardOpTimeout bounds one SSUBSCRIBE or SUNSUBSCRIBE's write; one that
// fails stays recorded in its PubSub, which sends it again when it
// reconnects.
const shardOpTimeout = 5 * time.Second

// shardConns holds the feed's order subscriptions: one go-redis PubSub
// per Redis master (one for a lone server or Sentinel), since a shard
// channel is served by its slot's master only. Subscribes and
// unsubscribes go out in the order they were asked for, from one
// goroutine, so that the caller never waits on Redis and the
// confirmations of one channel come back in that order.
type shardConns struct {
	client  redis.UniversalClient
	log     *slog.Logger
	handle  func(any)
	mu      sync.Mutex
	queue   []shardOp
	kick    chan struct{}
	stopped chan struct{}
	closed  bool
	// Touched by the sending goroutine only, and by close after it ended.
	byMaster map[string]*redis.PubSub
	byChan   map[string]*redis.PubSub
	loops    sync.WaitGroup
}

type shardOp struct {
	channel     string
	unsubscribe bool
}

func newShardConns(client redis.UniversalClient, log *slog.Logger, handle func(any)) *shardConns {
	s := &shardConns{client: client, log: log, handle: handle, kick: make(chan struct{}, 1), stopped: make(chan struct{}),
		byMaster: map[string]*redis.PubSub{}, byChan: map[string]*redis.PubSub{}}
	go s.send()
	return s
}

func (s *shardConns) subscribe(channel string) { s.push(shardOp{channel: channel}) }
func (s *shardConns) unsubscribe(channel string) {
	s.push(shardOp{channel: channel, unsubscribe: true})
}

func (s *shardConns) push(op shardOp) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.queue = append(s.queue, op)
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *shardConns) send() {
	defer close(s.stopped)
	for range s.kick {
		s.mu.Lock()
		ops, closed := s.queue, s.closed
		s.queue = nil
		s.mu.Unlock()
		if closed {
			return
		}
		for _, op := range ops {
			s.do(op)
		}
	}
}

func (s *shardConns) do(op shardOp) {
	ctx, cancel := context.WithTimeout(context.Background(), shardOpTimeout)
	defer cancel()
	if op.unsubscribe {
		if ps := s.byChan[op.channel]; ps != nil {
			delete(s.byChan, op.channel)
			s.report(op, ps.SUnsubscribe(ctx, op.channel))
		}
		return
	}
	// On a Redis Cluster the channel goes on its slot's master's
	// connection; one whose master is not known yet gets a connection of
	// its own, whose PubSub finds the master when it connects.
	master, alone := "", false
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		m, err := cc.MasterForKey(ctx, op.channel)
		if err != nil {
			s.report(op, err)
			alone = true
		} else {
			master = m.Options().Addr
		}
	}
	if ps := s.byMaster[master]; ps != nil && !alone {
		s.byChan[op.channel] = ps
		s.report(op, ps.SSubscribe(ctx, op.channel))
		return
	}
	// The PubSub's first channel picks its connection's node, so it is
	// made with the channel.
	ps := s.client.SSubscribe(ctx, op.channel)
	if !alone {
		s.byMaster[master] = ps
	}
	s.byChan[op.channel] = ps
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		for m := range ps.ChannelWithSubscriptions(redis.WithChannelSize(feedBuffer)) {
			s.handle(m)
		}
	}()
}

func (s *shardConns) report(op shardOp, err error) {
	if err != nil {
		s.log.Debug("order channel command not written; its connection sends it again when it reconnects",
			slog.String("channel", op.channel), slog.Bool("unsubscribe", op.unsubscribe), slog.Any("error", err))
	}
}

// close ends the sending goroutine, then every PubSub and its loop.
func (s *shardConns) close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.kick)
	s.mu.Unlock()
	<-s.stopped
	seen := map[*redis.PubSub]bool{}
	var errs []error
	for _, ps := range s.byChan {
		seen[ps] = true
	}
	for _, ps := range s.byMaster {
		seen[ps] = true
	}
	for ps := range seen {
		errs = append(errs, ps.Close())
	}
	s.loops.Wait()
	return errors.Join(errs...)
}
