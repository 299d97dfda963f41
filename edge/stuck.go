package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
)

// The stuck-order report finds non-terminal orders whose projection has
// not changed for a while, says who owns each and what would move it,
// and on request moves them: continue where the owner can act, takeover
// then continue where it cannot. It reads the read model's active-order
// index, checked against each projection record, and the Location Store.

// Owner states of the report.
const (
	// OwnerLive: the recorded owner is in this API's topology; a continue
	// reaches it.
	OwnerLive = "live"
	// OwnerGone: the recorded owner is not in the topology, or is recorded
	// gone; the order answers Unavailable until a takeover.
	OwnerGone = "gone"
	// OwnerNone: no member holds the order; the next command activates it
	// on a live member.
	OwnerNone = "none"
)

// Actions of the report: what would move the order.
const (
	ActionContinue = "continue"
	ActionTakeover = "takeover"
)

const (
	defaultStuckAge   = time.Minute
	defaultStuckLimit = 1000
	maxStuckLimit     = 10000
	// resumeWorkers bounds how many orders a resume drives at once, so a
	// long report does not flood the owners.
	resumeWorkers = 4
	// takeoverRoute is the admin takeover endpoint the resume calls for
	// orders whose owner is gone, when this build has it.
	takeoverRoute = "/admin/orders/:orderId/takeover"
)

// StuckOwner is the owner part of a report entry.
type StuckOwner struct {
	State  string `json:"state"`
	Member string `json:"member,omitempty"`
	Node   string `json:"node,omitempty"`
}

// StuckEntry is one order of the report.
type StuckEntry struct {
	OrderID         string     `json:"orderId"`
	Status          string     `json:"status"`
	UpdatedAtUnixMs int64      `json:"updatedAtUnixMs"`
	Version         int64      `json:"version"`
	Authority       string     `json:"authority"`
	Generation      int64      `json:"generation"`
	Owner           StuckOwner `json:"owner"`
	Action          string     `json:"action"`
	// Reason is why a continue cannot move the order now, if known:
	// ReasonVersionUnsupported when no live workflow member reads its
	// highest event schema (Schema); it moves once one that does runs.
	Reason string `json:"reason,omitempty"`
	// Schema is the order's highest event schema, with Reason.
	Schema int `json:"schema,omitempty"`
	// Resume is set by a resume: what it did and how it ended.
	Resume *ResumeOutcome `json:"resume,omitempty"`
}

// ResumeOutcome is what a resume did to one order.
type ResumeOutcome struct {
	// Done lists the actions that succeeded, in order.
	Done []string `json:"done"`
	// Status is the order's status the last successful action answered.
	Status string `json:"status,omitempty"`
	// Skipped says why nothing was tried ("owner gone; takeover not
	// requested", "takeover unavailable").
	Skipped string `json:"skipped,omitempty"`
	// Error is the failed action's public error.
	Error *apiError `json:"error,omitempty"`
}

// StuckReport is the reply of GET /admin/orders/stuck and of
// POST /admin/orders/stuck/resume.
type StuckReport struct {
	OlderThan  string `json:"olderThan"`
	AsOfUnixMs int64  `json:"asOfUnixMs"`
	// TakeoverAvailable says whether this API has the takeover operation
	// the takeover action needs.
	TakeoverAvailable bool         `json:"takeoverAvailable"`
	Orders            []StuckEntry `json:"orders"`
}

// stuckOrders is GET /admin/orders/stuck?olderThan=1m[&limit=N].
func (s *Server) stuckOrders(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.requestContext(r)
	defer cancel()
	rep, err := s.stuckReport(ctx, r)
	if err != nil {
		s.fail(w, r, fmt.Errorf("stuck-order report: %w", err))
		return
	}
	s.writeJSON(w, http.StatusOK, rep)
}

// resumeStuck is POST /admin/orders/stuck/resume?olderThan=1m[&takeover=true]:
// it continues every reported order whose owner is live (or that has
// none), and with takeover=true takes over, then continues, those whose
// owner is gone. Each order gets its own request timeout.
func (s *Server) resumeStuck(w http.ResponseWriter, r *http.Request) {
	takeover, err := boolParam(r, "takeover")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.requestContext(r)
	rep, err := s.stuckReport(ctx, r)
	cancel()
	if err != nil {
		s.fail(w, r, fmt.Errorf("stuck-order report: %w", err))
		return
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range min(resumeWorkers, len(rep.Orders)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				rep.Orders[i].Resume = s.resumeOne(r, &rep.Orders[i], takeover, rep.TakeoverAvailable)
			}
		}()
	}
	for i := range rep.Orders {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	s.writeJSON(w, http.StatusOK, rep)
}

func (s *Server) resumeOne(r *http.Request, e *StuckEntry, takeover, available bool) *ResumeOutcome {
	out := &ResumeOutcome{Done: []string{}}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	if e.Action == ActionTakeover {
		switch {
		case !takeover:
			out.Skipped = "owner gone; takeover not requested"
			return out
		case !available:
			out.Skipped = "takeover unavailable"
			return out
		}
		status, body := s.dispatchAdmin(ctx, r, http.MethodPost, "/admin/orders/"+url.PathEscape(e.OrderID)+"/takeover", "{}")
		if status/100 != 2 {
			out.Error = dispatchedError(status, body)
			s.log.WarnContext(ctx, "stuck order: takeover failed", slog.String("order", e.OrderID), slog.Int("status", status))
			return out
		}
		out.Done = append(out.Done, ActionTakeover)
		s.log.InfoContext(ctx, "stuck order taken over", slog.String("order", e.OrderID))
	}
	if e.Reason == ReasonVersionUnsupported {
		// A continue would answer the same; the order moves once a member
		// of a build that reads it runs.
		out.Skipped = fmt.Sprintf("no live workflow member reads its event schema %d", e.Schema)
		return out
	}
	res, err := s.cfg.Orders.ContinueOrderWorkflow(ctx, &contracts.ContinueOrderWorkflowReq{
		OrderId: e.OrderID, SourceCommandId: "stuck-resume-" + s.cfg.NewID(),
	})
	if err != nil {
		_, body := httpError(err)
		out.Error = &body
		s.log.WarnContext(ctx, "stuck order: continue failed", slog.String("order", e.OrderID), slog.Any("error", err))
		return out
	}
	out.Done = append(out.Done, ActionContinue)
	out.Status = res.GetState().GetStatus().String()
	s.log.InfoContext(ctx, "stuck order continued", slog.String("order", e.OrderID), slog.String("status", out.Status))
	return out
}

// stuckReport builds the report for the request's olderThan and limit.
func (s *Server) stuckReport(ctx context.Context, r *http.Request) (*StuckReport, error) {
	age, limit, err := stuckParams(r)
	if err != nil {
		return nil, err
	}
	st := s.cfg.Stuck
	now := time.Now()
	if st.Now != nil {
		now = st.Now()
	}
	found, err := st.Index.Stuck(ctx, age, now, limit)
	if err != nil {
		return nil, err
	}
	rep := &StuckReport{OlderThan: age.String(), AsOfUnixMs: now.UnixMilli(), TakeoverAvailable: s.takeoverAvailable(),
		Orders: make([]StuckEntry, 0, len(found))}
	var names map[string]string
	// Only when the live members read less than the level can an order
	// hold what none of them reads; otherwise no order's schema is read.
	readable, mixed := 0, false
	if st.Versions != nil && len(found) > 0 {
		newest, level, err := st.Versions.Readable(ctx)
		if err != nil {
			return nil, err
		}
		readable, mixed = newest, newest < level
	}
	for _, f := range found {
		rec, err := st.Authority.Get(ctx, grain.KindName, f.OrderID)
		if err != nil {
			return nil, err
		}
		e := StuckEntry{OrderID: f.OrderID, Status: f.State.GetStatus().String(), UpdatedAtUnixMs: f.State.GetUpdatedAtUnixMs(),
			Version: f.Version, Authority: string(rec.Status), Generation: rec.Generation}
		if rec.Status == location.Missing {
			e.Authority = "Missing"
		}
		if f.State == nil {
			// A damaged projection: the order is still unfinished as far
			// as anyone can tell; a continue repairs its projection.
			e.Status = "UNREADABLE"
		}
		e.Owner, e.Action = s.ownerOf(rec)
		if rec.Owner != "" {
			if names == nil {
				if names, err = st.Authority.MemberNames(ctx); err != nil {
					return nil, err
				}
			}
			e.Owner.Node = names[rec.Owner]
		}
		if mixed && e.Owner.State != OwnerLive {
			need, err := st.Versions.HighestSchema(ctx, f.OrderID)
			if err != nil {
				return nil, err
			}
			if need > readable {
				e.Reason, e.Schema = ReasonVersionUnsupported, need
			}
		}
		rep.Orders = append(rep.Orders, e)
	}
	return rep, nil
}

// ownerOf classifies the record's owner and picks the action that would
// move the order.
func (s *Server) ownerOf(rec location.Record) (StuckOwner, string) {
	if rec.Owner == "" || rec.Status == location.Missing {
		return StuckOwner{State: OwnerNone}, ActionContinue
	}
	o := StuckOwner{Member: rec.Owner, State: OwnerLive}
	m := s.cfg.Stuck.Members
	if g, ok := m.(GoneMembers); (ok && g.IsGone(rec.Owner)) || !m.Live(rec.Owner) {
		o.State = OwnerGone
		return o, ActionTakeover
	}
	return o, ActionContinue
}

func stuckParams(r *http.Request) (time.Duration, int, error) {
	q := r.URL.Query()
	age := defaultStuckAge
	if v := q.Get("olderThan"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return 0, 0, invalidField("olderThan", "must be a non-negative duration such as 1m or 90s")
		}
		age = d
	}
	limit := defaultStuckLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxStuckLimit {
			return 0, 0, invalidField("limit", "must be between 1 and %d", maxStuckLimit)
		}
		limit = n
	}
	return age, limit, nil
}

func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, invalidField(name, "must be true or false")
	}
	return b, nil
}

// rebuildActiveIndex is POST /admin/read-model/active-index/rebuild: it
// re-indexes every projection, for an index that was lost (the report
// would miss the orders it lost).
func (s *Server) rebuildActiveIndex(w http.ResponseWriter, r *http.Request) {
	// A scan of every projection takes longer than one request's usual
	// bound; the client's own timeout still ends it.
	n, err := s.cfg.Stuck.Index.RebuildActiveIndex(r.Context())
	if err != nil {
		s.fail(w, r, fmt.Errorf("rebuild active-order index: %w", err))
		return
	}
	s.log.InfoContext(r.Context(), "active-order index rebuilt", slog.Int("indexed", n))
	s.writeJSON(w, http.StatusOK, map[string]int{"indexed": n})
}

// takeoverAvailable reports whether the admin router has the takeover
// operation.
func (s *Server) takeoverAvailable() bool {
	for _, rt := range s.admin.Routes() {
		if rt.Method == http.MethodPost && rt.Path == takeoverRoute {
			return true
		}
	}
	return false
}

// dispatchAdmin runs one request through this server's own admin router,
// authenticated like its caller, and returns the status and body. The
// resume drives the takeover operation through its public admin route,
// so it does exactly what an operator's call would.
func (s *Server) dispatchAdmin(ctx context.Context, caller *http.Request, method, path, body string) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, method, path, strings.NewReader(body))
	if err != nil {
		return http.StatusInternalServerError, nil
	}
	req.RemoteAddr = caller.RemoteAddr
	req.Header.Set("Authorization", "Bearer "+s.cfg.AdminToken)
	req.Header.Set("Content-Type", "application/json")
	rec := &capture{header: http.Header{}, status: http.StatusOK}
	s.admin.ServeHTTP(rec, req)
	return rec.status, rec.body.Bytes()
}

// dispatchedError is the public error of a dispatched reply.
// A problem details reply becomes the embedded error of a report.
func dispatchedError(status int, body []byte) *apiError {
	var p problem
	if err := json.Unmarshal(body, &p); err != nil || p.Code == "" {
		return &apiError{Code: CodeInternal, Message: fmt.Sprintf("takeover answered %d", status)}
	}
	return &apiError{Code: p.Code, Message: p.Detail, Field: p.Field, Reason: p.Reason}
}

// capture is a minimal in-memory http.ResponseWriter for dispatchAdmin.
type capture struct {
	header http.Header
	status int
	body   bytes.Buffer
	wrote  bool
}

func (c *capture) Header() http.Header { return c.header }

func (c *capture) WriteHeader(status int) {
	if !c.wrote {
		c.status, c.wrote = status, true
	}
}

func (c *capture) Write(b []byte) (int, error) {
	c.wrote = true
	return c.body.Write(b)
}
