// Command commerce-api runs CommerceApi: the HTTP edge of the sample, a
// member of the shoppingmall.workflow cluster that hosts no grains.
//
//	commerce-api -node api-a -http 127.0.0.1:8081 -redis redis://127.0.0.1:6390/0 \
//	    -provider automanaged -automanaged-port 6331 -seeds 127.0.0.1:6331,...
//	commerce-api admin relocate -api http://127.0.0.1:9081 -order <id> [-target workflow-b]
//	commerce-api admin close -api http://127.0.0.1:9081 -order <id>
//	commerce-api admin stuck -api http://127.0.0.1:9081 [-older-than 1m] [-resume [-takeover]]
//	commerce-api admin takeover -api http://127.0.0.1:9081 -order <id> | -member <node-or-member-id> [-dry-run] [-force]
//	commerce-api admin timeline -api http://127.0.0.1:9081 -order <id> [-json]
//	commerce-api admin stock -api http://127.0.0.1:9081 -sku <sku> [-limit N] [-json]
//	commerce-api order place -api http://127.0.0.1:8081 -cart <cart> -address <addr> -method <pm> [-key <key>] [-wait]
//	commerce-api order get|wait|continue -api http://127.0.0.1:8081 <id>
//
// A process that lost sight of a workflow member which is not recorded
// gone, and can reach it again, exits with status 4 so that its supervisor
// starts it as a new member (edgenode.API.Rejoin).
//
// A dead Ready owner's orders answer 503 UNAVAILABLE (OWNER_GONE) until an
// operator takes them over (admin takeover). -takeover-after DURATION
// turns on a policy instead: the command that finds the owner gone still
// ends Unavailable, and the order is taken over in the background once the
// owner's gone record is that old, so that a new attempt succeeds. It is
// off by default.
//
// The admin surface (/admin/ with -admin, /self-check/ with -self-check,
// and /debug/pprof/) listens on -admin-http, loopback by default, never on
// -http, and requires `Authorization: Bearer <token>` with the token of
// -admin-token or SHOPPINGMALL_ADMIN_TOKEN (prefer the environment: a
// command line is visible to every user of the host). The process refuses
// to start with -admin or -self-check and no token. The admin subcommands
// take -api (the admin address) and -token (default
// SHOPPINGMALL_ADMIN_TOKEN).
//
// Admission control bounds the requests in flight per route kind:
// -admit-starts (POST /orders), -admit-commands (continue,
// rebuild-projection), -admit-reads (GET /orders/{id}) and -admit-waits
// (GET with waitFor). A request beyond its kind's budget is answered at
// once 503 UNAVAILABLE, reason OVERLOADED, with a Retry-After of 1–3 s;
// /healthz, /readyz and the admin listener are never shed. 0 takes the
// default, a negative budget is unbounded.
//
// Every flag can also be set from the environment as SHOPPINGMALL_<FLAG>
// (upper case, '-' as '_'); a flag on the command line wins. Evidence lines
// go to stdout, logs to stderr. Prometheus metrics are served on their own
// listener, -metrics-http (loopback by default; "off" serves none).
//
// Traces are exported over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, over http/protobuf unless
// OTEL_EXPORTER_OTLP_PROTOCOL says grpc; without it the process traces
// nothing. OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_SDK_DISABLED
// and OTEL_TRACES_EXPORTER=none are honored too; log lines inside a trace
// carry traceId and spanId.
//
// The process binds -http first and answers /healthz 200 and /readyz 503
// there while it waits for its stores (however long Redis is down or
// loading) and joins; then the edge takes the same socket over. The
// edge's /readyz answers 503 whenever the stores do not answer a PING.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/actors/node/procflags"
	"github.com/shoppingmall-go/shoppingmall/edge"
	"github.com/shoppingmall-go/shoppingmall/edge/edgenode"
	"github.com/shoppingmall-go/shoppingmall/eventstore/archive"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "admin" {
		os.Exit(admin(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "order" {
		os.Exit(order(os.Args[2:], os.Stdout, os.Stderr))
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "commerce-api:", err)
		if errors.Is(err, errRejoin) {
			os.Exit(edgenode.RejoinExitCode)
		}
		os.Exit(1)
	}
}

type options struct {
	procflags.Common
	httpAddr                             string
	selfCheck, admin                     bool
	adminHTTP, adminToken, orderIDSecret string
	requestTimeout, shutdownTimeout      time.Duration
	takeoverAfter                        time.Duration
	admission                            edge.Admission
}

// adminListener reports whether the admin listener runs: with -admin or
// -self-check, or with a token alone (profiles only).
func (o options) adminListener() bool { return o.admin || o.selfCheck || o.adminToken != "" }

func parse(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("commerce-api", flag.ContinueOnError)
	o.Register(fs, "api-a", 6331)
	fs.StringVar(&o.httpAddr, "http", "127.0.0.1:8081", "HTTP listen address")
	fs.BoolVar(&o.selfCheck, "self-check", false, "enable the runner-only /self-check/ hooks")
	fs.BoolVar(&o.admin, "admin", false, "enable /admin/ operations (on -admin-http)")
	fs.StringVar(&o.adminHTTP, "admin-http", "127.0.0.1:9081", "admin listen address: /admin/, /self-check/, /debug/pprof/ (keep it on loopback or a private network)")
	fs.StringVar(&o.adminToken, "admin-token", "", "bearer token the admin listener requires (prefer SHOPPINGMALL_ADMIN_TOKEN: a command line is visible to every user)")
	fs.StringVar(&o.orderIDSecret, "order-id-secret", "", "the cluster's secret OrderIds are derived under from idempotency keys: the same in every API process, never rotated, at least 16 bytes (prefer SHOPPINGMALL_ORDER_ID_SECRET)")
	fs.DurationVar(&o.requestTimeout, "request-timeout", 10*time.Second, "bound of one HTTP request")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 15*time.Second, "bound of a graceful stop")
	d := edge.DefaultAdmission
	fs.IntVar(&o.admission.Starts, "admit-starts", d.Starts, "in-flight budget of POST /orders; beyond it a start is answered 503 OVERLOADED at once (negative: unbounded)")
	fs.IntVar(&o.admission.Commands, "admit-commands", d.Commands, "in-flight budget of continue and rebuild-projection (negative: unbounded)")
	fs.IntVar(&o.admission.Reads, "admit-reads", d.Reads, "in-flight budget of GET /orders/{id} without waitFor (negative: unbounded)")
	fs.IntVar(&o.admission.Waits, "admit-waits", d.Waits, "in-flight budget of GET /orders/{id}?waitFor=terminal, apart from the others so waits never crowd out starts (negative: unbounded)")
	fs.DurationVar(&o.takeoverAfter, "takeover-after", 0, "policy: take over an order whose owner has been recorded gone this long, once a command found it gone (0: off; only an operator takes over)")
	if err := o.Parse(fs, args); err != nil {
		return o, err
	}
	if (o.admin || o.selfCheck) && strings.TrimSpace(o.adminToken) == "" {
		return o, errors.New("-admin and -self-check need an admin token (-admin-token or SHOPPINGMALL_ADMIN_TOKEN): the admin listener never runs unauthenticated")
	}
	if len(o.orderIDSecret) < edge.MinOrderIDSecretLen {
		return o, fmt.Errorf("an OrderId secret of at least %d bytes is required (-order-id-secret or SHOPPINGMALL_ORDER_ID_SECRET): every API process of the cluster derives OrderIds from idempotency keys under the same one, and it is never rotated", edge.MinOrderIDSecretLen)
	}
	return o, nil
}

func run(args []string) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	o.Fixtures = o.selfCheck
	proc, err := o.Open()
	if err != nil {
		return err
	}
	defer proc.Close()
	log, stores := proc.Log, proc.Stores

	// Bind the HTTP port first, so a taken port fails fast and leaves no
	// member behind, and so probes get a 503 while the stores are awaited.
	ln, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		return fmt.Errorf("http listen: %w", err)
	}
	var adminLn net.Listener
	if o.adminListener() {
		if adminLn, err = net.Listen("tcp", o.adminHTTP); err != nil {
			_ = ln.Close()
			return fmt.Errorf("admin listen: %w", err)
		}
		defer adminLn.Close()
		if ap, ok := adminLn.Addr().(*net.TCPAddr); ok && !ap.IP.IsLoopback() {
			log.Warn("the admin listener is not on loopback; only the bearer token guards it", "admin", adminLn.Addr().String())
		}
	}
	ready := node.NewReadiness(stores)
	interim, err := node.ServeInterim(ln, edgenode.StartingHandler(ready), log)
	if err != nil {
		_ = ln.Close()
		return err
	}
	log.Info("http listening; starting", "http", ln.Addr().String())
	if err := proc.WaitStores(ctx, ready); err != nil {
		_ = interim.Close()
		if ctx.Err() != nil {
			log.Info("stopped before the stores answered")
			return nil
		}
		return err
	}
	// The stores answered: joining only waits for this member's first
	// topology, which a healthy member sees within a few refreshes.
	joinCtx, cancelJoin := context.WithTimeout(ctx, 30*time.Second)
	defer cancelJoin()
	var arch archive.Store
	if proc.Archive != nil {
		arch = proc.Archive
	}
	api, err := edgenode.Start(joinCtx, edgenode.Config{
		Archive:        arch,
		Cluster:        o.Cluster(log),
		Stores:         stores,
		Readiness:      ready,
		RequestTimeout: o.requestTimeout,
		Admission:      o.admission,
		SelfCheck:      o.selfCheck,
		Admin:          o.admin,
		AdminToken:     o.adminToken,
		OrderIDSecret:  []byte(o.orderIDSecret),
		TakeoverAfter:  o.takeoverAfter,
		Evidence:       os.Stdout,
		Logger:         log,
		Metrics:        proc.Metrics,
		TracerProvider: proc.Tracing.Provider(),
	})
	if err != nil {
		_ = interim.Close()
		if ctx.Err() != nil {
			log.Info("stopped before joining")
			return nil
		}
		return err
	}
	ready.Joined(api.Member)
	handCtx, cancelHand := context.WithTimeout(context.Background(), o.requestTimeout)
	ln, err = interim.Handoff(handCtx)
	cancelHand()
	if err != nil {
		_ = api.Stop(context.Background())
		return err
	}
	log.Info("commerce-api started", "http", ln.Addr().String(), "member", api.Member.ID(), "metrics", proc.MetricsAddr(),
		"selfCheck", o.selfCheck, "admin", o.admin, "takeoverAfter", o.takeoverAfter)

	served := make(chan error, 2)
	go func() { served <- api.Server.Serve(ln) }()
	if adminLn != nil {
		log.Info("admin listening", "admin", adminLn.Addr().String())
		go func() { served <- api.Server.ServeAdmin(adminLn) }()
	}

	var rejoin error
	select {
	case <-ctx.Done():
		log.Info("stopping")
	case err := <-served:
		log.Error("http server ended", "error", err)
	case why := <-api.Rejoin():
		rejoin = fmt.Errorf("%w: %s", errRejoin, why)
		log.Warn("rejoining the cluster as a new member: "+why, "exitCode", edgenode.RejoinExitCode)
	}
	shutCtx, cancelShut := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancelShut()
	if err := api.Stop(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("graceful stop incomplete", "error", err)
	}
	log.Info("stopped")
	return rejoin
}

// errRejoin: the process stops so that its supervisor starts it again as
// a new member (edgenode.API.Rejoin).
var errRejoin = errors.New("leaving to rejoin as a new member")

const adminUsage = `usage: commerce-api admin relocate|close|stuck|takeover|timeline|stock|schema [flags]
  relocate -order ID [-target NODE] [-operation ID]
  close    -order ID
  stuck    [-older-than 1m] [-limit N] [-resume [-takeover]] [-rebuild-index] [-json]
  takeover -order ID | -member NODE-OR-MEMBER-ID [-dry-run] [-force] [-scan] [-operation ID] [-json]
  timeline -order ID [-json]
  stock    -sku SKU [-limit N] [-json]
  schema   [-json]
  schema raise -to N [-by NAME] [-json]
every subcommand: -api ADMIN_URL (the API's -admin-http) -token TOKEN (default $SHOPPINGMALL_ADMIN_TOKEN)`

// admin runs `commerce-api admin <subcommand>`: it calls the API's admin
// listener and prints the reply. Exit status 0 on success, 1 on an error
// reply (or, for stuck -resume, an order not resumed), 2 on a usage error.
func admin(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, adminUsage)
		return 2
	}
	switch args[0] {
	case "relocate", "close":
		return adminOrderOp(args[0], args[1:], stdout, stderr)
	case "stuck":
		return adminStuck(args[1:], stdout, stderr)
	case "takeover":
		return adminTakeover(args[1:], stdout, stderr)
	case "timeline":
		return adminTimeline(args[1:], stdout, stderr)
	case "stock":
		return adminStock(args[1:], stdout, stderr)
	case "schema":
		return adminSchema(args[1:], stdout, stderr)
	default:
		fmt.Fprintln(stderr, adminUsage)
		return 2
	}
}

// defaultAdminTimeout bounds one admin request.
const defaultAdminTimeout = 30 * time.Second

// adminClient is the part every admin subcommand shares: the admin
// address and its bearer token.
type adminClient struct {
	api, token string
	timeout    time.Duration
}

func (c *adminClient) register(fs *flag.FlagSet) {
	fs.StringVar(&c.api, "api", "http://127.0.0.1:9081", "the API's admin base URL (its -admin-http)")
	fs.StringVar(&c.token, "token", "", "admin bearer token (default $SHOPPINGMALL_ADMIN_TOKEN)")
	fs.DurationVar(&c.timeout, "timeout", defaultAdminTimeout, "request timeout (stuck -resume: 10m unless set)")
}

// parse parses the subcommand's flags; the token defaults to the same
// variable the server reads.
func (c *adminClient) parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := procflags.EnvDefaults(fs); err != nil {
		return err
	}
	if c.token == "" {
		c.token = os.Getenv("SHOPPINGMALL_ADMIN_TOKEN")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.token == "" {
		return errors.New("an admin token is required: -token or SHOPPINGMALL_ADMIN_TOKEN")
	}
	return nil
}

// do sends one request and returns the status and body.
func (c *adminClient) do(method, path, body string) (int, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, strings.TrimRight(c.api, "/")+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := (&http.Client{Timeout: c.timeout}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	return res.StatusCode, b, err
}

// fetch sends one request for subcommand cmd and decodes a 200 reply into
// v, returning the reply as sent. Anything else is reported and ends the
// subcommand: an error reply's body goes to stdout as the server sent it
// (its code and reason are what a script reads), the status or the
// transport error to stderr.
func (c *adminClient) fetch(cmd, method, path string, v any, stdout, stderr io.Writer) ([]byte, bool) {
	return c.send(cmd, method, path, "", v, stdout, stderr)
}

// send is fetch with a JSON request body (none when empty).
func (c *adminClient) send(cmd, method, path, body string, v any, stdout, stderr io.Writer) ([]byte, bool) {
	status, b, err := c.do(method, path, body)
	if err != nil {
		fmt.Fprintln(stderr, "commerce-api admin "+cmd+":", err)
		return nil, false
	}
	if status != http.StatusOK {
		fmt.Fprintln(stdout, strings.TrimSpace(string(b)))
		fmt.Fprintln(stderr, "commerce-api admin "+cmd+":", replyError(status, b))
		return nil, false
	}
	if err := json.Unmarshal(b, v); err != nil {
		fmt.Fprintln(stderr, "commerce-api admin "+cmd+": decode reply:", err)
		return nil, false
	}
	return b, true
}

// adminOrderOp runs relocate or close and prints the JSON reply.
func adminOrderOp(op string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("commerce-api admin "+op, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c adminClient
	c.register(fs)
	orderID := fs.String("order", "", "OrderId")
	var target, operation *string
	if op == "relocate" {
		target = fs.String("target", "", "target workflow node (optional)")
		operation = fs.String("operation", "", "relocation operation id (optional)")
	}
	if err := c.parse(fs, args); err != nil || *orderID == "" {
		fmt.Fprintln(stderr, "commerce-api admin "+op+": -order is required", err)
		return 2
	}
	body := "{}"
	if op == "relocate" {
		body = fmt.Sprintf(`{"targetNode":%s,"operationId":%s}`, jsonString(*target), jsonString(*operation))
	}
	status, b, err := c.do(http.MethodPost, "/admin/orders/"+url.PathEscape(*orderID)+"/"+op, body)
	if err != nil {
		fmt.Fprintln(stderr, "commerce-api admin:", err)
		return 1
	}
	fmt.Fprintln(stdout, strings.TrimSpace(string(b)))
	if status/100 != 2 {
		fmt.Fprintln(stderr, "commerce-api admin:", replyError(status, b))
		return 1
	}
	return 0
}

// problem is the API's error reply (RFC 9457 problem details, with the
// code, reason and field as extension members).
type problem struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
	Reason string `json:"reason"`
	Field  string `json:"field"`
}

// replyError says what an error reply was: its status and, when its body
// is problem details, the code, reason, field and detail.
func replyError(status int, b []byte) string {
	s := fmt.Sprint(status, " ", http.StatusText(status))
	var p problem
	if err := json.Unmarshal(b, &p); err != nil || p.Code == "" || p.Type == "" {
		return s
	}
	s += ": " + p.Code
	if p.Reason != "" {
		s += " " + p.Reason
	}
	if p.Field != "" {
		s += " (" + p.Field + ")"
	}
	return s + ": " + p.Detail
}

// stuckReport is the reply of the stuck-order routes (edge.StuckReport),
// read loosely so the CLI does not depend on the server's package.
type stuckReport struct {
	OlderThan         string `json:"olderThan"`
	AsOfUnixMs        int64  `json:"asOfUnixMs"`
	TakeoverAvailable bool   `json:"takeoverAvailable"`
	Orders            []struct {
		OrderID         string `json:"orderId"`
		Status          string `json:"status"`
		UpdatedAtUnixMs int64  `json:"updatedAtUnixMs"`
		Owner           struct {
			State string `json:"state"`
			Node  string `json:"node"`
		} `json:"owner"`
		Action string `json:"action"`
		Resume *struct {
			Done    []string `json:"done"`
			Status  string   `json:"status"`
			Skipped string   `json:"skipped"`
			Error   *struct {
				Code    string `json:"code"`
				Reason  string `json:"reason"`
				Message string `json:"message"`
			} `json:"error"`
		} `json:"resume"`
	} `json:"orders"`
}

// adminStuck lists the stuck orders and, with -resume, moves them.
func adminStuck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("commerce-api admin stuck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c adminClient
	c.register(fs)
	olderThan := fs.Duration("older-than", time.Minute, "list non-terminal orders whose projection has not changed for this long")
	limit := fs.Int("limit", 1000, "at most this many orders, oldest first")
	resume := fs.Bool("resume", false, "continue every listed order whose owner is live or none")
	takeover := fs.Bool("takeover", false, "with -resume: take over, then continue, the orders whose owner is gone")
	rebuild := fs.Bool("rebuild-index", false, "first rebuild the read model's active-order index from a scan of the projections")
	asJSON := fs.Bool("json", false, "print the server's JSON reply instead of a table")
	err := c.parse(fs, args)
	if err == nil && *takeover && !*resume {
		err = errors.New("-takeover goes with -resume")
	}
	if *resume && c.timeout == defaultAdminTimeout {
		// A resume drives every listed order, each within the API's own
		// request timeout, a few at a time.
		c.timeout = 10 * time.Minute
	}
	if err != nil {
		fmt.Fprintln(stderr, "commerce-api admin stuck:", err)
		return 2
	}
	if *rebuild {
		status, b, err := c.do(http.MethodPost, "/admin/read-model/active-index/rebuild", "")
		if err != nil || status != http.StatusOK {
			if err != nil {
				fmt.Fprintln(stderr, "commerce-api admin stuck: rebuild index:", err)
			} else {
				fmt.Fprintln(stderr, "commerce-api admin stuck: rebuild index:", replyError(status, b))
			}
			return 1
		}
		fmt.Fprintln(stdout, "active-order index rebuilt:", strings.TrimSpace(string(b)))
	}
	q := url.Values{"olderThan": {olderThan.String()}, "limit": {fmt.Sprint(*limit)}}
	method, path := http.MethodGet, "/admin/orders/stuck"
	if *resume {
		method, path = http.MethodPost, "/admin/orders/stuck/resume"
		q.Set("takeover", fmt.Sprint(*takeover))
	}
	var rep stuckReport
	b, ok := c.fetch("stuck", method, path+"?"+q.Encode(), &rep, stdout, stderr)
	if !ok {
		return 1
	}
	if *asJSON {
		fmt.Fprintln(stdout, strings.TrimSpace(string(b)))
	}
	failed := 0
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if !*asJSON {
		header := "ORDER\tSTATUS\tUNCHANGED\tOWNER\tACTION"
		if *resume {
			header += "\tRESULT"
		}
		fmt.Fprintln(tw, header)
	}
	counts := map[string]int{}
	for _, o := range rep.Orders {
		counts[o.Owner.State]++
		owner := o.Owner.State
		if o.Owner.Node != "" {
			owner += " (" + o.Owner.Node + ")"
		}
		age := time.Duration(rep.AsOfUnixMs-o.UpdatedAtUnixMs) * time.Millisecond
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s", o.OrderID, o.Status, age.Round(time.Second), owner, o.Action)
		if *resume {
			result := "not resumed"
			switch r := o.Resume; {
			case r == nil:
			case r.Error != nil:
				result = "failed: " + r.Error.Code
				if r.Error.Reason != "" {
					result += " " + r.Error.Reason
				}
				if len(r.Done) > 0 {
					result = strings.Join(r.Done, "+") + ", then " + result
				}
			case r.Skipped != "":
				result = r.Skipped
			default:
				result = strings.Join(r.Done, "+") + " -> " + r.Status
			}
			if o.Resume == nil || o.Resume.Error != nil || o.Resume.Skipped != "" {
				failed++
			}
			line += "\t" + result
		}
		if !*asJSON {
			fmt.Fprintln(tw, line)
		}
	}
	if !*asJSON {
		_ = tw.Flush()
		fmt.Fprintf(stdout, "%d stuck orders unchanged for %s or more (owner live %d, gone %d, none %d); takeover %s\n",
			len(rep.Orders), rep.OlderThan, counts["live"], counts["gone"], counts["none"],
			map[bool]string{true: "available", false: "unavailable"}[rep.TakeoverAvailable])
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "commerce-api admin stuck: %d of %d orders not resumed\n", failed, len(rep.Orders))
		return 1
	}
	return 0
}

func jsonString(s string) string {
	b, _ := json.Marshal(s) // a Go string always encodes
	return string(b)
}
