// Package takeover retires the authority of an order whose owner is lost,
// so that the next command cold-activates it on a live member, replays its
// stream and continues from the next step. It is an operator action (and
// an opt-in policy, Policy), never automatic failover: by default a dead
// Ready owner's orders stay Unavailable.
//
// A takeover of one order does, in this order, each step safe to repeat:
//
//  1. raise the order's stream fence past the old generation
//     (eventstore.Store.RaiseFence), so the old owner can never append
//     again, even if it is alive and resumes later;
//  2. record the operation in the Relocation Store (kind takeover, state
//     fenced): id, time, caller, member, node, old and new generation;
//  3. reset the Location record to Missing at generation+1, only if it
//     still names the old owner (location.Store.ResetTakenOver, which
//     also marks the record TakenOver so that the next activation is
//     counted as a takeover's, not a cold start), then mark the
//     operation committed.
//
// The stores may live on different Redis servers, so this cannot be one
// script; the order is what makes it safe. A crash after 1 leaves an order
// that is still Unavailable and whose old owner cannot write; after 2, a
// record a repeat with the same operation id (or, without one, the same
// order and generation) finishes. No external effect is repeated by the
// next owner: every module call carries a deterministic id, so an effect
// the old owner made but did not record returns its first result.
//
// Why its own package: the operation spans the event store, the Location
// Store and the Relocation Store, and none of those may import another.
// It needs no live owner and no actor: it runs in the API process with the
// stores alone, which is also why it works for a member that is dead,
// paused or cut off. It imports eventstore only for the Fence type; it
// must not import actors/..., edge or readmodel.
package takeover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

var (
	// ErrOwnerLive: the order's owner is neither recorded gone nor out of
	// the topology; only an explicit force evicts a live owner.
	ErrOwnerLive = errkind.New(errkind.FailedPrecondition, "takeover: the owner is live")
	// ErrNoOwner: the order has no Ready or Moving owner to take over
	// from (it is Missing, or being created).
	ErrNoOwner = errkind.New(errkind.FailedPrecondition, "takeover: the order has no owner to take over from")
	// ErrNotFound: the order was never activated.
	ErrNotFound = errkind.New(errkind.NotFound, "takeover: no such order")
	// ErrUnknownMember: no member id or node name matches.
	ErrUnknownMember = errkind.New(errkind.NotFound, "takeover: no such member")
	// ErrConflict: the operation id belongs to another order or to an
	// operation of another kind.
	ErrConflict = errkind.New(errkind.Conflict, "takeover: operation id in use")
	// ErrInvalidArgument: an empty or malformed id.
	ErrInvalidArgument = errkind.New(errkind.InvalidArgument, "takeover: invalid argument")
)

// Fencer raises an order's stream fence; eventstore.Store is one.
type Fencer interface {
	// RaiseFence retires every writer below minGeneration, stream or not,
	// and returns the fence in force. Repeating it changes nothing.
	RaiseFence(ctx context.Context, orderID string, minGeneration int64) (eventstore.Fence, error)
}

// Config configures a Service. Kind, Location, Relocations and Fences are
// required.
type Config struct {
	// Kind is the grain kind whose identities are order ids.
	Kind        string
	Location    location.Store
	Relocations relocation.Store
	Fences      Fencer
	// Live, optional, tells whether a member is in the topology as this
	// process sees it. A member that is not counts as gone for a takeover
	// even before its gone record lands. Without it only the record
	// counts.
	Live func(memberID string) bool
	// DropRoute, optional, is told of every record taken over, with the
	// record as it was, so that cached routes to the old grain are dropped
	// ((*placement.Lookup).DropRoute).
	DropRoute func(kind, id string, old location.Record)
	// Parallel bounds the order takeovers a member takeover runs at once;
	// default 8.
	Parallel int
	// Now is the clock of operation records; default time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Service takes orders over. Safe for concurrent use.
type Service struct {
	cfg Config
	log *slog.Logger
}

// New validates cfg and returns a Service.
func New(cfg Config) (*Service, error) {
	var missing []string
	if cfg.Kind == "" {
		missing = append(missing, "Kind")
	}
	if cfg.Location == nil {
		missing = append(missing, "Location")
	}
	if cfg.Relocations == nil {
		missing = append(missing, "Relocations")
	}
	if cfg.Fences == nil {
		missing = append(missing, "Fences")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: takeover config lacks %v", ErrInvalidArgument, missing)
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 8
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg, log: cfg.Logger}, nil
}

// Request asks for a takeover.
type Request struct {
	// OrderID names the order of Service.Order.
	OrderID string
	// Member names the member of Service.Member: a member id, or a node
	// name, which covers every incarnation of that node that is gone
	// (every one, with Force).
	Member string
	// OperationID, optional, names the operation: repeating a takeover
	// with it finishes a half-done one. A member takeover derives one per
	// order (OperationID + "." + orderId). Without it the id is
	// "takeover-<orderId>-g<generation>", so a plain repeat converges too.
	OperationID string
	// Caller says who asks, for the operation record.
	Caller string
	// Force also evicts a live owner (a member behind a partition).
	Force bool
	// DryRun lists what would be taken over and changes nothing.
	DryRun bool
	// Scan makes a member takeover also read every Location record, for
	// records older than the per-member index.
	Scan bool
}

// Outcome is what a takeover did to one order.
type Outcome string

const (
	// TakenOver: the fence is raised, the operation recorded and the
	// record Missing at NewGeneration (or already past it).
	TakenOver Outcome = "taken-over"
	// WouldTakeOver: a dry run found the order taken-over-able.
	WouldTakeOver Outcome = "would-take-over"
	// AlreadyTakenOver: the operation had finished before; nothing done.
	AlreadyTakenOver Outcome = "already-taken-over"
	// Superseded: after the fence was raised the record named another
	// owner (a relocation of a live, forced owner committed meanwhile);
	// the record was left alone. Its owner, fenced too, releases it at
	// its first append.
	Superseded Outcome = "superseded"
)

// Result is the takeover of one order.
type Result struct {
	OrderID     string
	OperationID string
	// Member is the old owner's member id, Node its node name.
	Member string
	Node   string
	// OldGeneration is the generation retired; NewGeneration the one the
	// fence and the record stand at now: the next activation is above it.
	OldGeneration int64
	NewGeneration int64
	Outcome       Outcome
	// OwnerLive: the owner was live and Force evicted it.
	OwnerLive bool
}

func checkID(what, id string) error {
	if id == "" || strings.ContainsAny(id, "{}") {
		return fmt.Errorf("%w: %s %q", ErrInvalidArgument, what, id)
	}
	return nil
}

// DefaultOperationID is the operation id of a takeover of orderID at
// generation when the caller gives none.
func DefaultOperationID(orderID string, generation int64) string {
	return "takeover-" + orderID + "-g" + strconv.FormatInt(generation, 10)
}

// Order takes one order over. Without Force its Ready (or Moving) owner
// must be recorded gone or out of the topology, else ErrOwnerLive. An
// order without an owner is ErrNoOwner, one never activated ErrNotFound.
// A repeat with the operation id of a half-done takeover finishes it; of
// a finished one answers AlreadyTakenOver.
func (s *Service) Order(ctx context.Context, req Request) (Result, error) {
	if err := checkID("orderId", req.OrderID); err != nil {
		return Result{}, err
	}
	if req.OperationID != "" {
		if err := checkID("operationId", req.OperationID); err != nil {
			return Result{}, err
		}
	}
	return s.order(ctx, req, nil)
}

// order takes req.OrderID over; with owners, only from one of them.
func (s *Service) order(ctx context.Context, req Request, owners map[string]string) (Result, error) {
	if req.OperationID != "" {
		op, found, err := s.operation(ctx, req.OperationID, req.OrderID)
		if err != nil {
			return Result{}, err
		}
		if found {
			if owners != nil && !hasKey(owners, op.Member) {
				return Result{}, fmt.Errorf("%w: operation %s took order %s over from member %s", ErrConflict, op.ID, op.OrderID, op.Member)
			}
			return s.resume(ctx, op, req.DryRun)
		}
	}
	rec, err := s.cfg.Location.Get(ctx, s.cfg.Kind, req.OrderID)
	if err != nil {
		return Result{}, err
	}
	if rec.Status != location.Ready && rec.Status != location.Moving {
		if rec.Generation == 0 {
			return Result{}, fmt.Errorf("%w: order %s", ErrNotFound, req.OrderID)
		}
		return Result{}, fmt.Errorf("%w: order %s is %q at generation %d", ErrNoOwner, req.OrderID, statusName(rec.Status), rec.Generation)
	}
	if owners != nil && !hasKey(owners, rec.Owner) {
		return Result{}, fmt.Errorf("%w: order %s is owned by member %s now", ErrNoOwner, req.OrderID, rec.Owner)
	}
	live, err := s.ownerLive(ctx, rec.Owner)
	if err != nil {
		return Result{}, err
	}
	if live && !req.Force {
		return Result{}, fmt.Errorf("%w: order %s is owned by member %s; force evicts a live owner", ErrOwnerLive, req.OrderID, rec.Owner)
	}
	node := ""
	if owners != nil {
		node = owners[rec.Owner]
	}
	if node == "" {
		node = s.nodeOf(ctx, rec.Owner)
	}
	opID := req.OperationID
	if opID == "" {
		opID = DefaultOperationID(req.OrderID, rec.Generation)
		// A plain repeat of a half-done takeover finds its record.
		op, found, err := s.operation(ctx, opID, req.OrderID)
		if err != nil {
			return Result{}, err
		}
		if found {
			return s.resume(ctx, op, req.DryRun)
		}
	}
	res := Result{
		OrderID: req.OrderID, OperationID: opID, Member: rec.Owner, Node: node,
		OldGeneration: rec.Generation, NewGeneration: rec.Generation + 1, OwnerLive: live,
	}
	if req.DryRun {
		res.Outcome = WouldTakeOver
		return res, nil
	}
	now := s.cfg.Now().UnixMilli()
	op := relocation.Operation{
		ID: opID, OrderID: req.OrderID, Kind: relocation.KindTakeover,
		Source: node, Member: rec.Owner, Caller: req.Caller,
		Generation: rec.Generation, NewGeneration: rec.Generation + 1,
		State: relocation.OpFenced, StartedAtUnixMs: now, UpdatedAtUnixMs: now,
	}
	return s.finish(ctx, op, rec, res)
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

func statusName(st location.Status) string {
	if st == location.Missing {
		return "Missing"
	}
	return string(st)
}

// operation reads a takeover record by id; one of another order or kind
// is ErrConflict.
func (s *Service) operation(ctx context.Context, opID, orderID string) (relocation.Operation, bool, error) {
	op, err := s.cfg.Relocations.GetOperation(ctx, opID)
	switch {
	case errors.Is(err, relocation.ErrNotFound):
		return relocation.Operation{}, false, nil
	case err != nil:
		return relocation.Operation{}, false, err
	case op.OrderID != orderID || op.Kind != relocation.KindTakeover:
		return relocation.Operation{}, false, fmt.Errorf("%w: operation %s is a %s of order %s",
			ErrConflict, opID, kindName(op.Kind), op.OrderID)
	}
	return op, true, nil
}

func kindName(k relocation.OpKind) string {
	if k == relocation.KindRelocation {
		return "relocation"
	}
	return string(k)
}

// recorded is what op's record says of its takeover, with outcome.
func recorded(op relocation.Operation, outcome Outcome) Result {
	return Result{
		OrderID: op.OrderID, OperationID: op.ID, Member: op.Member, Node: op.Source,
		OldGeneration: op.Generation, NewGeneration: op.NewGeneration, Outcome: outcome,
	}
}

// resume finishes a recorded takeover, or reports it finished.
func (s *Service) resume(ctx context.Context, op relocation.Operation, dryRun bool) (Result, error) {
	if op.State.Final() {
		return recorded(op, AlreadyTakenOver), nil
	}
	if dryRun {
		return recorded(op, WouldTakeOver), nil
	}
	rec, err := s.cfg.Location.Get(ctx, s.cfg.Kind, op.OrderID)
	if err != nil {
		return Result{}, err
	}
	s.log.Info("finishing a half-done takeover", slog.String("order", op.OrderID), slog.String("operation", op.ID))
	return s.finish(ctx, op, rec, recorded(op, ""))
}

// finish runs the three steps of a takeover in their order and completes
// res, the takeover's result so far. old is the record as read before,
// for the routes to drop.
func (s *Service) finish(ctx context.Context, op relocation.Operation, old location.Record, res Result) (Result, error) {
	// 1. No writer below the new generation can append from here on.
	if _, err := s.cfg.Fences.RaiseFence(ctx, op.OrderID, op.NewGeneration); err != nil {
		return Result{}, fmt.Errorf("takeover of order %s: raise the fence: %w", op.OrderID, err)
	}
	// 2. The operation is on record before the authority changes, so a
	// crash from here on leaves something to finish.
	op.State, op.UpdatedAtUnixMs = relocation.OpFenced, s.cfg.Now().UnixMilli()
	if err := s.cfg.Relocations.PutOperation(ctx, op); err != nil {
		if errors.Is(err, relocation.ErrConflict) {
			// Another caller (an API racing on the same default id)
			// finished this very operation meanwhile.
			if done, found, gerr := s.operation(ctx, op.ID, op.OrderID); gerr == nil && found && done.State.Final() {
				return recorded(done, AlreadyTakenOver), nil
			}
		}
		return Result{}, fmt.Errorf("takeover of order %s: record operation %s: %w", op.OrderID, op.ID, err)
	}
	// 3. The next command activates above the raised fence.
	out, err := s.cfg.Location.ResetTakenOver(ctx, s.cfg.Kind, op.OrderID, op.Member, op.Generation, op.NewGeneration)
	if err != nil {
		return Result{}, fmt.Errorf("takeover of order %s: reset the location record: %w", op.OrderID, err)
	}
	res.Outcome = TakenOver
	if out == location.ResetOtherOwner {
		res.Outcome = Superseded
		op.Error = "the location record named another owner after the fence was raised; left alone"
	}
	op.State, op.UpdatedAtUnixMs = relocation.OpCommitted, s.cfg.Now().UnixMilli()
	if err := s.cfg.Relocations.PutOperation(ctx, op); err != nil {
		return Result{}, fmt.Errorf("takeover of order %s: commit operation %s: %w", op.OrderID, op.ID, err)
	}
	if s.cfg.DropRoute != nil && old.Owner == op.Member && old.Generation == op.Generation {
		s.cfg.DropRoute(s.cfg.Kind, op.OrderID, old)
	}
	s.log.Info("order taken over", slog.String("order", op.OrderID), slog.String("operation", op.ID),
		slog.String("member", op.Member), slog.String("node", op.Source), slog.String("caller", op.Caller),
		slog.Int64("oldGeneration", op.Generation), slog.Int64("newGeneration", op.NewGeneration),
		slog.Bool("ownerLive", res.OwnerLive), slog.String("outcome", string(res.Outcome)), slog.String("record", out.String()))
	return res, nil
}

// ownerLive tells whether member may still be serving: not recorded gone,
// and (when this process sees the topology) in it.
func (s *Service) ownerLive(ctx context.Context, member string) (bool, error) {
	_, gone, err := s.cfg.Location.IsGone(ctx, member)
	if err != nil {
		return false, err
	}
	if gone {
		return false, nil
	}
	if s.cfg.Live != nil {
		return s.cfg.Live(member), nil
	}
	return true, nil
}

// nodeOf returns a member's node name from the published names or its
// gone record; "" when neither knows it.
func (s *Service) nodeOf(ctx context.Context, member string) string {
	if names, err := s.cfg.Location.MemberNames(ctx); err == nil && names[member] != "" {
		return names[member]
	}
	if g, ok, err := s.cfg.Location.IsGone(ctx, member); err == nil && ok {
		return g.Node
	}
	return ""
}

// Member takes over every order owned by the named member: a member id,
// or a node name, which covers every incarnation of that node that is
// gone (every one, with Force). It finds the orders in the per-member
// index (and, with Scan, in every record), checks each record's owner
// before it acts, and drops index entries the records contradict. The
// results are sorted by order id; an order whose takeover failed is
// reported in errs (by order id) and the others still run. A member id
// that is live, or a node name whose every incarnation is, is
// ErrOwnerLive without Force; a name that matches no member,
// ErrUnknownMember.
func (s *Service) Member(ctx context.Context, req Request) (results []Result, errs map[string]error, err error) {
	if err := checkID("member", req.Member); err != nil {
		return nil, nil, err
	}
	if req.OperationID != "" {
		if err := checkID("operationId", req.OperationID); err != nil {
			return nil, nil, err
		}
	}
	owners, err := s.members(ctx, req.Member, req.Force)
	if err != nil {
		return nil, nil, err
	}
	ids := map[string]bool{}
	for m := range owners {
		owned, err := s.cfg.Location.Owned(ctx, m, s.cfg.Kind)
		if err != nil {
			return nil, nil, err
		}
		for _, id := range owned {
			ids[id] = true
		}
	}
	if req.Scan {
		err := s.cfg.Location.ScanRecords(ctx, s.cfg.Kind, func(id string, rec location.Record) error {
			if (rec.Status == location.Ready || rec.Status == location.Moving) && hasKey(owners, rec.Owner) {
				ids[id] = true
			}
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
	}
	sorted := make([]string, 0, len(ids))
	for id := range ids {
		sorted = append(sorted, id)
	}
	sort.Strings(sorted)

	var mu sync.Mutex
	errs = map[string]error{}
	sem := make(chan struct{}, s.cfg.Parallel)
	var wg sync.WaitGroup
	for _, id := range sorted {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			sub := req
			sub.OrderID, sub.Member = id, ""
			if req.OperationID != "" {
				sub.OperationID = req.OperationID + "." + id
			}
			// The member's own incarnations were chosen above: within
			// them, a live one is evicted only because Force chose it.
			sub.Force = true
			r, err := s.order(ctx, sub, owners)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, ErrNoOwner), errors.Is(err, ErrNotFound):
				// The index listed an order this member no longer owns.
				if !req.DryRun {
					for m := range owners {
						_ = s.cfg.Location.Unindex(context.WithoutCancel(ctx), m, s.cfg.Kind, id)
					}
				}
			case err != nil:
				errs[id] = err
			default:
				results = append(results, r)
			}
		}()
	}
	wg.Wait()
	sort.Slice(results, func(i, j int) bool { return results[i].OrderID < results[j].OrderID })
	if len(errs) == 0 {
		errs = nil
	}
	return results, errs, nil
}

// members resolves a member id or node name to the member ids (and their
// node names) a member takeover covers.
func (s *Service) members(ctx context.Context, name string, force bool) (map[string]string, error) {
	names, err := s.cfg.Location.MemberNames(ctx)
	if err != nil {
		return nil, err
	}
	gone, err := s.cfg.Location.Gone(ctx)
	if err != nil {
		return nil, err
	}
	nodeOf := func(id string) string {
		if n := names[id]; n != "" {
			return n
		}
		return gone[id].Node
	}
	live := func(id string) bool {
		if _, ok := gone[id]; ok {
			return false
		}
		return s.cfg.Live == nil || s.cfg.Live(id)
	}
	_, named := names[name]
	_, recorded := gone[name]
	if named || recorded {
		if live(name) && !force {
			return nil, fmt.Errorf("%w: member %s (node %q); force evicts a live owner", ErrOwnerLive, name, nodeOf(name))
		}
		return map[string]string{name: nodeOf(name)}, nil
	}
	out := map[string]string{}
	var skipped []string
	for _, ids := range []map[string]bool{keys(names), keysGone(gone)} {
		for id := range ids {
			if nodeOf(id) != name {
				continue
			}
			if force || !live(id) {
				out[id] = name
			} else {
				skipped = append(skipped, id)
			}
		}
	}
	switch {
	case len(out) == 0 && len(skipped) == 0:
		return nil, fmt.Errorf("%w: %q is neither a member id nor a node name", ErrUnknownMember, name)
	case len(out) == 0:
		// Saying "nothing to take over" here would hide that the node's
		// only incarnation is still seen serving.
		return nil, fmt.Errorf("%w: every incarnation of node %s (%v) is live; force evicts a live owner", ErrOwnerLive, name, skipped)
	}
	return out, nil
}

func keys(m map[string]string) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

func keysGone(m map[string]location.GoneMember) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}
