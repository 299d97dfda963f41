package placement

import (
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"
)

// The mailbox of the grains this package hosts.
//
// A grain stops by poisoning itself, and protoactor drops, without a
// word, every user message that its mailbox still holds once the actor
// has stopped: a request that reached the mailbox after the PoisonPill,
// before the grain was unregistered, went unanswered, and its caller
// waited out its whole deadline (a probe's follow-up call right after the
// probe's answer, a command racing an idle passivation). Here such a
// message goes to the dead-letter process instead, which answers a
// request with a DeadLetterResponse, as it does for any message to a pid
// that is gone: the caller forgets the pid and resolves the identity
// again.
//
// The mailbox also holds at most a capacity of requests. One that finds
// it full is answered at once with Overloaded, on the sender's own
// goroutine, and never queued: a grain whose turns are slow (a store that
// stalls) must not gather an unbounded queue whose callers all time out
// anyway, each holding its memory and its caller's goroutine meanwhile.
// protoactor's Bounded mailbox is no answer: it blocks the sender until
// there is room, and for a remote caller the sender is the endpoint
// reader of the whole link, so one full grain would stall every grain
// behind that link. BoundedDropping drops the message without a word,
// leaving its caller to wait out its deadline. A refusal here costs the
// caller one reply and says why.
//
// Only requests count and are refused: user messages that carry a sender
// to answer. A message without one comes from the member itself (the
// grain's own steps, confirms and retry timers, its idle timeout, the
// activator's Passivate, the PoisonPill) and is always queued: dropping
// one would lose a step of an order nobody else will drive, and the grain
// bounds them itself (at most one retry timer pending, one step queued
// per turn). System messages (Stop, Watch, Terminated, Restart) do not go
// through the user queue and are never refused.
//
// The activator's own mailbox stays unbounded: it answers every message
// in the turn that reads it, without I/O (a refusal included), so its
// queue drains at memory speed, and bounding it would refuse the grains'
// own reports (opened, retiring, work left) that keep its counts right.

// hostMailbox returns the producer of the hosted grains' mailboxes:
// protoactor's unbounded mailbox, bounded here to capacity requests
// (none when capacity <= 0), with stopped-actor messages bounced to sys's
// dead letters. refused counts the requests answered Overloaded; nil
// counts nothing.
func hostMailbox(sys *actor.ActorSystem, capacity int, refused prometheus.Counter) actor.MailboxProducer {
	unbounded := actor.Unbounded()
	return func() actor.Mailbox {
		return &bouncingMailbox{Mailbox: unbounded(), sys: sys, capacity: int32(max(capacity, 0)), refused: refused}
	}
}

type bouncingMailbox struct {
	actor.Mailbox
	sys      *actor.ActorSystem
	capacity int32
	refused  prometheus.Counter
	// queued counts the requests in the queue: taken before one is
	// pushed, given back once the actor is handed it, so the queue never
	// holds more than capacity of them.
	queued atomic.Int32
}

// PostUserMessage queues message, unless it is a request that finds the
// queue full: that one is answered Overloaded at once.
func (m *bouncingMailbox) PostUserMessage(message any) {
	if m.capacity > 0 {
		if sender := requester(message); sender != nil {
			if !m.reserve() {
				if m.refused != nil {
					m.refused.Inc()
				}
				m.sys.Root.Send(sender, &Overloaded{Reason: "the grain's mailbox is full"})
				return
			}
		}
	}
	m.Mailbox.PostUserMessage(message)
}

// reserve takes a place in the queue for one request, if there is one.
func (m *bouncingMailbox) reserve() bool {
	for {
		n := m.queued.Load()
		if n >= m.capacity {
			return false
		}
		if m.queued.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// RegisterHandlers puts the bouncer between the mailbox and the actor.
func (m *bouncingMailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.Mailbox.RegisterHandlers(&bouncer{MessageInvoker: invoker, box: m}, dispatcher)
}

// requester is the sender a request expects its answer from; nil for a
// message that is not a request.
func requester(message any) *actor.PID {
	if env, ok := message.(*actor.MessageEnvelope); ok {
		return env.Sender
	}
	return nil
}

// bouncer is the actor's invoker as the mailbox sees it. A mailbox runs
// one message at a time, but its runs move between goroutines, hence
// the atomic.
type bouncer struct {
	actor.MessageInvoker
	box *bouncingMailbox
	// stopped is set once the actor has handled a Stop: a grain has no
	// children, so it is stopped when that returns. (An actor with
	// children would still be stopping; a message bounced then finds an
	// actor that is leaving anyway.)
	stopped atomic.Bool
}

func (b *bouncer) InvokeSystemMessage(message any) {
	b.MessageInvoker.InvokeSystemMessage(message)
	if _, ok := message.(*actor.Stop); ok {
		b.stopped.Store(true)
	}
}

func (b *bouncer) InvokeUserMessage(message any) {
	if b.box.capacity > 0 && requester(message) != nil {
		// Out of the queue: its place is free for the next request.
		b.box.queued.Add(-1)
	}
	if b.stopped.Load() {
		b.box.sys.DeadLetter.SendUserMessage(nil, message)
		return
	}
	b.MessageInvoker.InvokeUserMessage(message)
}
