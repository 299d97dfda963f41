package placement

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
)

// The activator's and the self-fence watch's metrics' full names. Each
// member counts the grains it hosts; a member that hosts no kind (an API
// member) shows them at zero.
const (
	// MetricActivations counts activations whose grain opened, by cause
	// (LabelCause). The requester records it Ready right after; for an
	// activation that carries a first command (Activate.first), this
	// member does, before it delivers the command, or a ReadyCarrier
	// grain does in its first write.
	MetricActivations = telemetry.Namespace + "_activations_total"
	// MetricActivationsAborted counts activations whose grain could not
	// open its state, or stopped before it reported its open, by cause:
	// nothing was recorded Ready, and the next command activates again.
	MetricActivationsAborted = telemetry.Namespace + "_activations_aborted_total"
	// MetricGrainsHosted is the number of grains this member hosts and
	// serves: opened, and not yet on their way out.
	MetricGrainsHosted = telemetry.Namespace + "_grains_hosted"
	// MetricOverloadRefusals counts what this member answered Overloaded
	// at once instead of queueing it, by the limit it hit (LabelLimit):
	// a rate above zero is an overload, seen from the member.
	MetricOverloadRefusals = telemetry.Namespace + "_overload_refusals_total"
	// MetricPassivationsForRoom counts the grains with no work left that
	// this member asked to passivate to make room for a new activation,
	// beyond Limits.MaxHosted.
	MetricPassivationsForRoom = telemetry.Namespace + "_passivations_for_room_total"
	// MetricSelfFences counts the times this member fenced itself
	// (RunSelfFence), by LabelFenceReason. The process exits right after
	// (order-workflow: status 3), so a scrape sees the count only if one
	// lands in between; the restarted process's new
	// process_start_time_seconds is the trace that outlives it.
	MetricSelfFences = telemetry.Namespace + "_self_fences_total"
)

// LabelFenceReason says why a member fenced itself: FenceEvicted or
// FenceLeaseExpired.
const LabelFenceReason = "reason"

// The values of LabelFenceReason.
const (
	// FenceEvicted: the member found itself recorded gone (ErrEvicted).
	FenceEvicted = "evicted"
	// FenceLeaseExpired: the process did not run for longer than the
	// lease (ErrLeaseExpired).
	FenceLeaseExpired = "lease_expired"
)

// FenceReason is the LabelFenceReason value of a reason RunSelfFence
// returned.
func FenceReason(err error) string {
	if errors.Is(err, ErrEvicted) {
		return FenceEvicted
	}
	return FenceLeaseExpired
}

// LabelLimit names the limit an overload refusal hit: LimitMailbox,
// LimitHosted or LimitActivations.
const LabelLimit = "limit"

// The values of LabelLimit.
const (
	// LimitMailbox: a request found its grain's mailbox full
	// (Limits.MailboxCapacity).
	LimitMailbox = "mailbox"
	// LimitHosted: an activation found the member at Limits.MaxHosted
	// with every hosted grain having work left.
	LimitHosted = "hosted"
	// LimitActivations: an activation found Limits.MaxActivations in
	// progress.
	LimitActivations = "activations"
)

// LabelCause says why an activation happened: CauseCold, CauseRelocation
// or CauseTakeover.
const LabelCause = "cause"

// The values of LabelCause.
const (
	// CauseCold: a Missing identity activated a new generation.
	CauseCold = "cold"
	// CauseRelocation: a planned relocation activated the same generation
	// on its target.
	CauseRelocation = "relocation"
	// CauseTakeover: the first activation after a takeover reset the
	// identity's record (location.Record.TakenOver).
	CauseTakeover = "takeover"
	// causeUnknown is a request from a member that names no reason.
	causeUnknown = "unspecified"
)

// Cause is the LabelCause value of an activation reason.
func Cause(r ActivationReason) string {
	switch r {
	case ActivationReason_ACTIVATION_REASON_COLD:
		return CauseCold
	case ActivationReason_ACTIVATION_REASON_RELOCATION:
		return CauseRelocation
	case ActivationReason_ACTIVATION_REASON_TAKEOVER:
		return CauseTakeover
	}
	return causeUnknown
}

type activatorMetrics struct {
	activations *prometheus.CounterVec
	aborted     *prometheus.CounterVec
	hosted      prometheus.Gauge
	refused     *prometheus.CounterVec
	// refusedMailbox is refused's mailbox series, which every grain's
	// mailbox counts into.
	refusedMailbox prometheus.Counter
	passivated     prometheus.Counter
	fences         *prometheus.CounterVec
}

func newActivatorMetrics(reg *telemetry.Registry) *activatorMetrics {
	f := reg.Factory()
	m := &activatorMetrics{
		activations: f.NewCounterVec(prometheus.CounterOpts{Name: MetricActivations,
			Help: "Activations hosted by this member whose grain opened and was answered, by cause (cold, relocation, takeover)."},
			[]string{LabelCause}),
		aborted: f.NewCounterVec(prometheus.CounterOpts{Name: MetricActivationsAborted,
			Help: "Activations on this member whose grain could not open its state or stopped while opening, by cause; nothing was recorded Ready."},
			[]string{LabelCause}),
		hosted: f.NewGauge(prometheus.GaugeOpts{Name: MetricGrainsHosted,
			Help: "Grains this member hosts and serves (opened, not leaving)."}),
	}
	m.refused = f.NewCounterVec(prometheus.CounterOpts{Name: MetricOverloadRefusals,
		Help: "Requests and activations this member answered Overloaded at once, by the limit they hit (mailbox, hosted, activations)."},
		[]string{LabelLimit})
	m.refusedMailbox = m.refused.WithLabelValues(LimitMailbox)
	m.refused.WithLabelValues(LimitHosted)
	m.refused.WithLabelValues(LimitActivations)
	m.passivated = f.NewCounter(prometheus.CounterOpts{Name: MetricPassivationsForRoom,
		Help: "Grains with no work left this member asked to passivate to make room for a new activation."})
	m.fences = f.NewCounterVec(prometheus.CounterOpts{Name: MetricSelfFences,
		Help: "Times this member fenced itself, by reason (evicted, lease_expired); its process exits right after."},
		[]string{LabelFenceReason})
	m.fences.WithLabelValues(FenceEvicted)
	m.fences.WithLabelValues(FenceLeaseExpired)
	// Every cause shows from the first scrape on, at zero, so that a rate
	// or a delta never starts from an absent series.
	for _, c := range []string{CauseCold, CauseRelocation, CauseTakeover} {
		m.activations.WithLabelValues(c)
		m.aborted.WithLabelValues(c)
	}
	return m
}
