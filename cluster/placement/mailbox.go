package placement

import (
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// The mailbox of the grains this package hosts. A grain stops by
// poisoning itself, and protoactor drops, without a word, every user
// message that its mailbox still holds once the actor has stopped: a
// request that reached the mailbox after the PoisonPill, before the grain
// was unregistered, went unanswered, and its caller waited out its whole
// deadline (a probe's follow-up call right after the probe's answer, a
// command racing an idle passivation). Here such a message goes to the
// dead-letter process instead, which answers a request with a
// DeadLetterResponse, as it does for any message to a pid that is gone:
// the caller forgets the pid and resolves the identity again.

// hostMailbox returns the producer of the hosted grains' mailboxes:
// protoactor's unbounded mailbox, with stopped-actor messages bounced to
// sys's dead letters.
func hostMailbox(sys *actor.ActorSystem) actor.MailboxProducer {
	unbounded := actor.Unbounded()
	return func() actor.Mailbox { return &bouncingMailbox{Mailbox: unbounded(), sys: sys} }
}

type bouncingMailbox struct {
	actor.Mailbox
	sys *actor.ActorSystem
}

// RegisterHandlers puts the bouncer between the mailbox and the actor.
func (m *bouncingMailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.Mailbox.RegisterHandlers(&bouncer{MessageInvoker: invoker, sys: m.sys}, dispatcher)
}

// bouncer is the actor's invoker as the mailbox sees it. A mailbox runs
// one message at a time, but its runs move between goroutines, hence
// the atomic.
type bouncer struct {
	actor.MessageInvoker
	sys *actor.ActorSystem
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
	if b.stopped.Load() {
		b.sys.DeadLetter.SendUserMessage(nil, message)
		return
	}
	b.MessageInvoker.InvokeUserMessage(message)
}
