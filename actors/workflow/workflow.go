// Package workflow is the OrderWorkflow application layer (docs/contract.md,
// "Components"): it replays an order's event stream, folds it with the
// domain, decides the next step, calls the inventory and payment modules
// with deterministic ids, appends the resulting event at the expected
// version under the owner's fence, and then updates the read-model
// projection — in that order, so the stream is always the source of record
// and the projection always trails it.
//
// It owns no transport and no actor runtime: the grain adapter
// (actors/grain) drives it one turn at a time. It must not import
// actors/grain, cluster/... but cluster/telemetry (the process's metrics
// registry, which every layer may use: metrics.go), edge, runner/... or
// any Redis client; stores and modules come in through their interfaces.
package workflow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

var (
	// ErrNotFound: the order has no event stream. Nothing was written.
	ErrNotFound = errkind.New(errkind.NotFound, "workflow: order not found")
	// ErrConflict: the command contradicts what the stream already holds
	// (a different start for a started order, or a step whose external
	// effect is already recorded).
	ErrConflict = errkind.New(errkind.Conflict, "workflow: conflicting command")
	// ErrKeyReused: a start's idempotency key already started this order
	// with a different cart, shipping address or payment method. It is
	// judged from the stream and the first envelope, so it holds when the
	// key's mapping was lost; nothing is recorded or marked.
	ErrKeyReused = errkind.New(errkind.KeyReused, "workflow: idempotency key reused with a different request")
	// ErrFenced: a newer owner of the order exists; the caller must stop
	// and never write again. It is the event store's sentinel, so both
	// names match with errors.Is.
	ErrFenced = eventstore.ErrFenced
	// ErrInvalidArgument: the command or configuration is malformed.
	ErrInvalidArgument = errkind.New(errkind.InvalidArgument, "workflow: invalid argument")
	// ErrReleaseRefused: the inventory module refused to release a
	// reservation the stream records as held. Recording a compensation
	// that did not happen would be a lie, so the order stays where it is
	// until an operator looks.
	ErrReleaseRefused = errors.New("workflow: inventory refused to release the reservation")
	// ErrVersionUnsupported: the order's stream holds an event of a newer
	// schema than this build reads (SchemaVersion). Nothing was folded or
	// written: folding it with its new fields dropped could decide wrong,
	// so the order waits for a member of a build that reads it.
	ErrVersionUnsupported = errkind.New(errkind.VersionUnsupported, "workflow: event schema newer than this build reads")
)

// Envelopes is the Relocation Store's record of each order's first
// activation envelope: the StartOrderWorkflowReq that activated it.
// OrderStartedEvent does not carry paymentMethodId (docs/contract.md,
// "StartOrderWorkflow"), so an owner that replays the stream (after a
// relocation or a close) reads it here to authorize payment.
type Envelopes interface {
	// AddFirst adds to u, the unit that records req's order's start, the
	// write of req as the order's first envelope unless one is already
	// stored: the first write wins and repeating it is harmless. Nothing
	// is written until u is committed, and then with the start.
	AddFirst(u *eventstore.Unit, req *contracts.StartOrderWorkflowReq) error
	// LoadFirst returns the order's first envelope, or an error wrapping
	// ErrNotFound when none is stored.
	LoadFirst(ctx context.Context, orderID string) (*contracts.StartOrderWorkflowReq, error)
}

// Config wires a Service. Every field is required unless marked optional.
type Config struct {
	// Kind is the cluster kind; the SpotId is Kind + "/" + OrderId.
	Kind        string
	Events      eventstore.Store
	ReadModel   readmodel.Store
	Idempotency commerce.Idempotency
	Inventory   commerce.Inventory
	Payment     commerce.Payment
	Envelopes   Envelopes
	// Commits commits every write of an order's state, one unit of work
	// (eventstore.Unit) each, as one atomic step: each step's events with
	// their projection, and a new order's start with its first envelope
	// and its mapping's started mark. Only a step left behind on purpose
	// (LeaveProjectionBehind) appends through Events alone.
	Commits readmodel.Committer
	// Barrier is set when the stores' writes wait for replicas: an answer
	// that acknowledges an order's state without writing it (a repeated
	// start, a continue or rebuild with nothing to write) first passes it
	// (eventstore.Barrier). Nil adds nothing.
	Barrier eventstore.Barrier
	// Now returns the current time in unix milliseconds.
	Now func() int64
	// Codec is the event codec the Service reads and writes with; nil is
	// Events, this build's. Another is a build of another schema, which
	// tests run beside this one in a process.
	Codec *Codec
	// SchemaLevel returns the cluster's compatibility level as this
	// member last read it (compat.Gate.Level); every event is written as
	// the lower of it and SchemaVersion, so that no member of an older
	// build that may still own the order meets a schema it cannot read.
	// It must not block. Nil writes SchemaVersion: a cluster of one build.
	SchemaLevel func() int
	// Evidence receives the raw evidence lines (docs/contract.md,
	// "Evidence lines"), each with a single Write. Optional: nil discards
	// them.
	Evidence io.Writer
	// Logger is optional: nil discards.
	Logger *slog.Logger
	// Metrics is optional: the process's registry, for the orders and
	// steps this Service's owners record (metrics.go). Nil counts into
	// metrics served nowhere. Build one Service per registry.
	Metrics *telemetry.Registry
}

// Service runs order workflows. It is safe for concurrent use by many
// grains; each Order it hands out belongs to one grain.
type Service struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	// evidence keeps lines whole when grains of many orders write to the
	// same log at once.
	evidence *telemetry.Evidence
}

// New validates cfg and returns a Service.
func New(cfg Config) (*Service, error) {
	var missing []string
	if cfg.Kind == "" {
		missing = append(missing, "Kind")
	}
	if cfg.Events == nil {
		missing = append(missing, "Events")
	}
	if cfg.ReadModel == nil {
		missing = append(missing, "ReadModel")
	}
	if cfg.Idempotency == nil {
		missing = append(missing, "Idempotency")
	}
	if cfg.Inventory == nil {
		missing = append(missing, "Inventory")
	}
	if cfg.Payment == nil {
		missing = append(missing, "Payment")
	}
	if cfg.Envelopes == nil {
		missing = append(missing, "Envelopes")
	}
	if cfg.Commits == nil {
		missing = append(missing, "Commits")
	}
	if cfg.Now == nil {
		missing = append(missing, "Now")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: workflow config lacks %v", ErrInvalidArgument, missing)
	}
	s := &Service{cfg: cfg, log: cfg.Logger, metrics: newMetrics(cfg.Metrics)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.evidence = telemetry.NewEvidence(cfg.Evidence, s.log)
	return s, nil
}

// SpotID is the order's global Spot ID as evidence names it.
func (s *Service) SpotID(orderID string) string { return s.cfg.Kind + "/" + orderID }

// barrier passes the replication barrier (Config.Barrier) for an answer
// about to acknowledge o's state without having written it: a write of
// an earlier attempt may have fallen short of the replicas, and this
// answer must not acknowledge what a failover can still lose.
func (s *Service) barrier(ctx context.Context, o *Order) error {
	if s.cfg.Barrier == nil {
		return nil
	}
	if err := s.cfg.Barrier.Barrier(ctx, o.id); err != nil {
		return fmt.Errorf("replication barrier of order %s: %w", o.id, err)
	}
	return nil
}

func (s *Service) writeEvidence(line string) { s.evidence.Line(line) }
