package edge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// Idempotency is the IdempotencyKey → OrderId mapping of the
// CommerceStateStore.
type Idempotency interface {
	// Reserve maps key to candidate (pending) unless the key is already
	// mapped, atomically, and returns the mapping in force and whether this
	// call created it. Of concurrent reservers exactly one wins and every
	// caller gets the winner's mapping.
	Reserve(ctx context.Context, key string, candidate commerce.Mapping) (commerce.Mapping, bool, error)
	// Forget deletes key's mapping only while it is still m and pending,
	// atomically, and reports whether it did (commerce.Idempotency's).
	Forget(ctx context.Context, key string, m commerce.Mapping) (bool, error)
}

// Carts reads cart snapshots.
type Carts interface {
	// GetCart returns the snapshot, or an error wrapping commerce.ErrNotFound.
	GetCart(ctx context.Context, cartID string) (commerce.Cart, error)
}

// CartReserver loads a start's cart and reserves its idempotency key in
// one step, with Carts.GetCart's and Idempotency.Reserve's contracts: a
// cart that does not exist fails with an error wrapping
// commerce.ErrNotFound and reserves nothing. A reservation that creates
// the mapping may take the minted order's creation lock in the same step
// and say so with the lock's token (CartReservation.LockToken; see
// placement.WithHeldCreation). Unreserve gives back a mapping that step
// created when the API then refused the request (see
// commerce.Redis.Unreserve), and its lock; kept reports a mapping left in
// place.
type CartReserver interface {
	ReserveForCart(ctx context.Context, cartID, key string, candidate commerce.Mapping) (commerce.CartReservation, error)
	Unreserve(ctx context.Context, cartID, key string, res commerce.CartReservation) (kept bool, err error)
}

// ReadModel reads the OrderReadModelStore.
type ReadModel interface {
	// Get returns the projection and the stream version it reflects, or an
	// error wrapping readmodel.ErrNotFound. It has no side effect.
	Get(ctx context.Context, orderID string) (*contracts.OrderState, int64, error)
}

// Orders sends the public order commands to an order's grain by its
// OrderId; the cluster finds the owner. Errors wrap workflow.ErrNotFound,
// workflow.ErrInvalidArgument, workflow.ErrConflict,
// placement.ErrUnavailable, location.ErrTimeout or grain.ErrInternal.
type Orders interface {
	// StartOrderWorkflow records the start (or finds it recorded) and
	// reports whether this very call recorded OrderStartedEvent.
	StartOrderWorkflow(ctx context.Context, req *contracts.StartOrderWorkflowReq) (*contracts.StartOrderWorkflowRes, bool, error)
	// ContinueOrderWorkflow performs the next possible step.
	ContinueOrderWorkflow(ctx context.Context, req *contracts.ContinueOrderWorkflowReq) (*contracts.ContinueOrderWorkflowRes, error)
	// RebuildOrderProjection rewrites the read model from the stream alone.
	RebuildOrderProjection(ctx context.Context, req *contracts.RebuildOrderProjectionReq) (*contracts.RebuildOrderProjectionRes, error)
}

// Operator sends operator and runner commands to an order's grain by its
// OrderId. Errors are those of Orders, plus grain.ErrFailedPrecondition.
type Operator interface {
	// RelocateOrder moves a live order to another workflow member keeping
	// its generation.
	RelocateOrder(ctx context.Context, req *contracts.RelocateOrderReq) (*contracts.RelocateOrderRes, error)
	// CloseOrder releases the order's authority; the next command activates
	// generation + 1.
	CloseOrder(ctx context.Context, req *contracts.CloseOrderReq) (*contracts.CloseOrderRes, error)
	// ResumeOrder wakes a continuation parked at an interrupt gate.
	ResumeOrder(ctx context.Context, req *contracts.ResumeOrderReq) (*contracts.ResumeOrderRes, error)
}

// Streams tells where an order's events are (the OrderEventStore:
// eventstore.StreamChecker).
type Streams interface {
	// Presence reports whether the order has no event, a stream in
	// Redis, or was archived (with its sealed record). It must not read
	// the read model: rebuild-projection exists for an order whose
	// projection is lost.
	Presence(ctx context.Context, orderID string) (eventstore.Presence, error)
}

// ArchivedOrders answers the questions about an archived order that need
// its history, which only the archive holds (actors/archiver.Cold).
// Errors wrap archive.ErrUnavailable (kind StoreUnavailable) when the
// archive does not answer.
type ArchivedOrders interface {
	// History returns the archived order's sealed record and its events
	// in version order.
	History(ctx context.Context, orderID string) (eventstore.SealedRecord, []eventstore.Envelope, error)
	// Rebuild re-derives the final state from the archive's events and
	// rewrites the state the sealed record keeps only if it differs,
	// writing nothing else.
	Rebuild(ctx context.Context, orderID string) (*contracts.OrderState, bool, error)
}

// Topology is what this process's cluster member currently sees.
type Topology interface {
	// WorkflowMembers returns how many live members host the order
	// workflow kind. It must not block.
	WorkflowMembers() int
}

// MemberNames reads the Location Store's member id → node name mapping.
type MemberNames interface {
	// MemberNames returns the whole mapping; a member publishes its name
	// before it joins the topology.
	MemberNames(ctx context.Context) (map[string]string, error)
}

// Authority reads the Location Store.
type Authority interface {
	// Get returns the order's authority record; Missing with generation 0
	// for a never-activated identity.
	Get(ctx context.Context, kind, id string) (location.Record, error)
	MemberNames
}

// ActiveOrders is the read model's index of non-terminal orders
// (readmodel.ActiveIndex).
type ActiveOrders interface {
	// Stuck returns the non-terminal orders whose projection has not
	// changed since now-olderThan, oldest first, at most limit (0: all),
	// each checked against its projection record.
	Stuck(ctx context.Context, olderThan time.Duration, now time.Time, limit int) ([]readmodel.StuckOrder, error)
	// RebuildActiveIndex re-indexes every projection from a scan of the
	// records and returns how many non-terminal orders it indexed.
	RebuildActiveIndex(ctx context.Context) (int, error)
}

// Members tells whether an order's recorded owner can serve it.
type Members interface {
	// Live reports whether the member id is in this process's current
	// topology. It must not block.
	Live(memberID string) bool
}

// GoneMembers is optionally implemented by a Members that also knows which
// members the Location Store records as gone.
type GoneMembers interface {
	// IsGone reports whether the member id is recorded gone. It must not
	// block.
	IsGone(memberID string) bool
}

// Stuck holds what the stuck-order report (GET /admin/orders/stuck) needs.
type Stuck struct {
	Index     ActiveOrders
	Authority Authority
	Members   Members
	// Versions, optional, tells the orders no live workflow member reads
	// (a rollback below their schema): their entries carry the reason
	// VERSION_UNSUPPORTED. Nil reports none.
	Versions StuckVersions
	// Now is the report's clock; optional, default time.Now.
	Now func() time.Time
}

// StuckVersions says which event schemas the live workflow members read
// and which an order holds.
type StuckVersions interface {
	// Readable returns the newest event schema any live workflow member
	// reads (0 with none) and the compatibility level, above which no
	// order holds anything.
	Readable(ctx context.Context) (newest, level int, err error)
	// HighestSchema returns the highest event schema the order's stream
	// holds (eventstore.SchemaReader).
	HighestSchema(ctx context.Context, orderID string) (int, error)
}

// Config configures a Server. Fields without "optional" are required.
type Config struct {
	// NodeID is this process's node name (api-a), used in evidence lines.
	NodeID      string
	Idempotency Idempotency
	Carts       Carts
	// CartReserve is optional: with it a start's cart read and key
	// reservation are one round trip instead of two.
	CartReserve CartReserver
	ReadModel   ReadModel
	Orders      Orders
	Topology    Topology
	// Operator is required when Admin is enabled.
	Operator Operator
	// Admin enables /admin/ on the admin handler (otherwise 404).
	Admin bool
	// Mounts, optional, are surfaces served on the admin handler besides
	// /admin/: the runner's /self-check/ hooks (edge/selfcheck), mounted
	// by the API's wiring only when enabled (otherwise 404).
	Mounts []Mount
	// AdminToken is the bearer token every request to the admin handler
	// (AdminHandler, ServeAdmin) must carry; it also enables
	// /debug/pprof/ there. Required when Admin is set or anything is
	// mounted: the admin surface never runs unauthenticated, and never on
	// the public handler.
	AdminToken string
	// Stuck, optional, enables the stuck-order report and its resume under
	// /admin/ (with Admin).
	Stuck *Stuck
	// Takeover, optional, enables the takeover routes under /admin/ (with
	// Admin): POST /admin/orders/{id}/takeover and
	// /admin/members/{member}/takeover.
	Takeover Takeover
	// Timeline, optional, enables the per-order timeline under /admin/
	// (with Admin): GET /admin/orders/{id}/timeline.
	Timeline *Timeline
	// Terminal, optional, wakes the bounded waits of GET
	// /orders/{id}?waitFor=terminal (wait.go); without it such a GET is
	// refused 400 (field waitFor).
	Terminal TerminalWatcher
	// NoticeTo, optional, is the address of this member's terminal-notice
	// actor (grain.ServeNotices): the starts this API tracks ask their
	// grain to tell it of the order's end (grain.NoticeTo), so that the
	// wait after its own start learns of it over the cluster link.
	NoticeTo string
	// Barrier, optional, is set when the stores' writes wait for
	// replicas: a start answered from its started mapping, which writes
	// nothing, passes it first, so the 200 never acknowledges an order
	// whose start a failover can still lose (eventstore.Barrier). Nil
	// adds nothing.
	Barrier eventstore.Barrier
	// Streams, optional, lets continue and rebuild-projection answer an
	// order without an event stream 404 from one cheap check, without a
	// grain call (and so without a cold activation), and an archived
	// order from its sealed record or the archive, never activating it;
	// without it they ask the grain, which answers the same 404.
	Streams Streams
	// Archive, optional, answers rebuild-projection and the timeline of
	// an archived order (one whose hot keys the archiver removed, which
	// Streams reports) from the archive; without it they answer 503
	// STORE_UNAVAILABLE. The other answers for an archived order need
	// only its sealed record and never this.
	Archive ArchivedOrders
	// Admission is the public routes' in-flight budget per route kind
	// (admission.go); its zero value takes DefaultAdmission.
	Admission Admission
	// RequestTimeout bounds each request's work; optional, default 10 s.
	RequestTimeout time.Duration
	// Evidence receives raw evidence lines, one Write per line; optional,
	// default discarded. Shared with a RouteObserver, it must accept
	// concurrent writes (os.Stdout does).
	Evidence io.Writer
	// Logger receives structured logs; optional, default slog.Default().
	// The edge wraps its handler with LogHandler, so lines logged while
	// serving a request carry its id.
	Logger *slog.Logger
	// Metrics is the process's registry, where the edge's HTTP metrics
	// (MetricHTTPRequests, MetricHTTPRequestDuration, MetricUnavailable)
	// are registered; optional: nil counts them but serves them nowhere.
	// One Server per registry: a second one's metrics would collide.
	Metrics *telemetry.Registry
	// TracerProvider makes each request's server span (tracing.go);
	// optional, default the global provider (no-op unless a main set one).
	TracerProvider trace.TracerProvider
	// OrderIDSecret is the cluster's secret under which a start's OrderId
	// is derived from its idempotency key (order.OrderIDFor), at least
	// MinOrderIDSecretLen bytes. Every API process of a cluster must have
	// the same one, and it is never rotated: an API with another secret
	// would give a retried key a second order whenever its mapping is
	// gone.
	OrderIDSecret []byte
	// NewID returns fresh ids (sourceCommandIds of operator commands);
	// optional, default random UUIDs.
	NewID func() string
}

// MinOrderIDSecretLen is the shortest Config.OrderIDSecret: 128 bits, as
// many as the OrderId keeps of its MAC.
const MinOrderIDSecretLen = 16

// ErrConfig: the configuration cannot build a Server.
var ErrConfig = errors.New("edge: invalid configuration")

func (c *Config) check() error {
	var missing []string
	need := func(ok bool, name string) {
		if !ok {
			missing = append(missing, name)
		}
	}
	need(c.NodeID != "", "NodeID")
	need(c.Idempotency != nil, "Idempotency")
	need(c.Carts != nil, "Carts")
	need(c.ReadModel != nil, "ReadModel")
	need(c.Orders != nil, "Orders")
	need(c.Topology != nil, "Topology")
	if len(c.OrderIDSecret) < MinOrderIDSecretLen {
		missing = append(missing, fmt.Sprintf("OrderIDSecret (at least %d bytes)", MinOrderIDSecretLen))
	}
	if c.Admin {
		need(c.Operator != nil, "Operator")
	}
	if c.Admin || len(c.Mounts) > 0 {
		need(c.AdminToken != "", "AdminToken")
	}
	for i, m := range c.Mounts {
		need(m != nil, fmt.Sprintf("Mounts[%d]", i))
	}
	if s := c.Stuck; s != nil {
		need(s.Index != nil, "Stuck.Index")
		need(s.Authority != nil, "Stuck.Authority")
		need(s.Members != nil, "Stuck.Members")
	}
	missing = append(missing, c.Timeline.missing()...)
	if len(missing) > 0 {
		return fmt.Errorf("%w: missing %v", ErrConfig, missing)
	}
	return nil
}
