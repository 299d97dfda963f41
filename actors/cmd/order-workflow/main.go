// Command order-workflow runs an OrderWorkflow process: a member of the
// shoppingmall.workflow cluster hosting the order grains
// (shoppingmall.order-workflow).
//
//	order-workflow -node workflow-a -redis redis://127.0.0.1:6390/0 \
//	    -provider automanaged -automanaged-port 6333 -seeds 127.0.0.1:6331,...
//
// `order-workflow seed -demo` (or -file seed.json) writes the demo
// catalogue (or a commerce.LoadSeed file) into the CommerceStateStore's
// Redis and exits: the seeding step of a deployment (docs/deploy.md).
//
// Every flag can also be set from the environment as SHOPPINGMALL_<FLAG>
// (upper case, '-' as '_'); a flag on the command line wins. Evidence lines
// go to stdout, logs to stderr. SIGTERM (or SIGINT) drains: live orders
// are relocated to another member (or closed when none is left) before the
// process leaves the cluster and exits 0.
//
// A member that finds itself recorded gone (another member saw it leave
// the topology, e.g. after a long pause), or whose process did not run for
// longer than -lease, fences itself: its grains stop where they are,
// nothing is released or relocated, it logs "self-fenced: <why>" and the
// process exits with status 3 so that its supervisor starts it again as a
// new member. A Location Store that does not answer for longer than
// -lease suspends the member instead ("suspended: ..."): it serves
// nothing (503 STORE_UNAVAILABLE) and keeps its grains until the store
// answers; then it reads its gone record first and serves again, or
// fences if it was recorded gone.
//
// The operations listener (-ops-http, net/http) answers /healthz (the
// process runs) and /readyz (the stores answer a PING and the member has
// joined; otherwise 503 with a JSON body naming what is missing), and
// serves the process's profiles under /debug/pprof/, which require
// `Authorization: Bearer <token>` when -admin-token (or
// SHOPPINGMALL_ADMIN_TOKEN, the API's admin token) is set. It listens
// first: the process then waits for its stores, however long Redis is down
// or loading, before it joins the cluster. Prometheus metrics are on their
// own listener, -metrics-http.
//
// Traces are exported over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, over http/protobuf unless
// OTEL_EXPORTER_OTLP_PROTOCOL says grpc; without it the process traces
// nothing. OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_SDK_DISABLED
// and OTEL_TRACES_EXPORTER=none are honored too; log lines inside a trace
// carry traceId and spanId.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/actors/node/procflags"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "seed" {
		if err := runSeed(os.Args[2:], os.Stdout, os.Stderr); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				os.Exit(2)
			}
			fmt.Fprintln(os.Stderr, "order-workflow:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "order-workflow:", err)
		if errors.Is(err, node.ErrSelfFenced) {
			os.Exit(node.SelfFenceExitCode)
		}
		os.Exit(1)
	}
}

type options struct {
	procflags.Common
	fixtures                           bool
	idleTimeout, requestTimeout, drain time.Duration
	lease, reconcileEvery, pruneAfter  time.Duration
	retention, archiveEvery            time.Duration
	opsHTTP, adminToken                string
	limits                             placement.Limits
	schemaAutoRaise                    bool
}

func parse(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("order-workflow", flag.ContinueOnError)
	o.Register(fs, "workflow-a", 6333)
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 5*time.Minute, "passivate an order idle this long, releasing its authority (0 never); bounds the grains a member holds")
	fs.DurationVar(&o.requestTimeout, "request-timeout", 10*time.Second, "default grain call timeout")
	fs.DurationVar(&o.drain, "drain-timeout", 30*time.Second, "bound of the graceful drain")
	fs.DurationVar(&o.lease, "lease", node.DefaultLease, "suspend once the Location Store has not answered for this long, and self-fence (exit 3) once the process did not run for this long: the member may have been recorded gone meanwhile")
	fs.IntVar(&o.limits.MailboxCapacity, "mailbox-capacity", placement.DefaultLimits.MailboxCapacity, "requests one order's mailbox holds; the next is answered 503 OVERLOADED at once")
	fs.IntVar(&o.limits.MaxHosted, "max-hosted", placement.DefaultLimits.MaxHosted, "orders this member hosts; beyond it finished orders are passivated to make room, and with none to passivate new activations are refused OVERLOADED")
	fs.IntVar(&o.limits.MaxActivations, "max-activations", placement.DefaultLimits.MaxActivations, "activations (and passivations to make room) this member runs at once; the next is refused OVERLOADED")
	fs.DurationVar(&o.pruneAfter, "prune-members-after", node.DefaultPruneAfter, "how long a member stays recorded gone before the reconciler's pass prunes its name, gone record, heartbeat and takeover index, once no order names it (docs/operations.md); below 0 never")
	fs.DurationVar(&o.reconcileEvery, "reconcile-every", node.DefaultReconcileEvery, "time between two passes of the index reconciler, which adds back every entry of the active and per-member indexes a lost write left out, from a scan of the per-order records (the first pass at a random point of the first period; 0 = none)")
	fs.DurationVar(&o.retention, "retention", 0, "grace after an order's terminal event before its history moves to the -archive and its hot keys leave Redis, but for a compact record (docs/archive.md); 0 keeps every order in Redis; above 0 needs -archive")
	fs.DurationVar(&o.archiveEvery, "archive-every", 30*time.Second, "time between two archiver passes, with -retention")
	fs.BoolVar(&o.schemaAutoRaise, "schema-auto-raise", false, "raise the cluster's compatibility level by itself, recorded with this node's name, once every live workflow member reads a newer event schema; off, only `commerce-api admin schema raise` does (docs/operations.md)")
	fs.BoolVar(&o.fixtures, "fixtures", false, "enable the runner's interrupt fixtures (never in production)")
	fs.StringVar(&o.opsHTTP, "ops-http", node.DefaultOpsAddr, "operations listener (/healthz, /readyz, /debug/pprof/); port 0 picks one, see the log; e.g. :8090 for a pod's probes")
	fs.StringVar(&o.adminToken, "admin-token", "", "bearer token the ops listener's /debug/pprof/ requires (prefer SHOPPINGMALL_ADMIN_TOKEN: a command line is visible to every user)")
	if err := o.Parse(fs, args); err != nil {
		return o, err
	}
	switch {
	case o.retention < 0:
		return o, fmt.Errorf("-retention %s is negative", o.retention)
	case o.retention > 0 && o.Archive == "":
		return o, fmt.Errorf("refusing to start: -retention %s moves finished orders out of Redis, and needs -archive to keep them", o.retention)
	case o.retention > 0 && o.archiveEvery <= 0:
		return o, fmt.Errorf("-archive-every %s must be above 0", o.archiveEvery)
	case o.retention > 0 && o.idleTimeout <= 0:
		return o, fmt.Errorf("refusing to start: -retention %s archives an order only once its grain passivated, which -idle-timeout 0 never does", o.retention)
	}
	o.IndexFinished = o.retention > 0
	return o, nil
}

func run(args []string) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	o.Fixtures = o.fixtures
	proc, err := o.Open()
	if err != nil {
		return err
	}
	defer proc.Close()
	log, stores := proc.Log, proc.Stores

	ready := node.NewReadiness(stores)
	ops, err := node.StartOps(node.OpsConfig{Addr: o.opsHTTP, Readiness: ready, Token: strings.TrimSpace(o.adminToken), Logger: log})
	if err != nil {
		return err
	}
	defer func() {
		shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ops.Shutdown(shutCtx)
	}()
	log.Info("ops listening", "ops", ops.Addr())

	if err := proc.WaitStores(ctx, ready); err != nil {
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
	cc := o.Cluster(log)
	cc.RequestTimeout = o.requestTimeout
	cc.Limits = o.limits
	w, err := node.StartWorkflow(joinCtx, node.WorkflowConfig{
		Cluster:     cc,
		Stores:      stores,
		IdleTimeout: o.idleTimeout,
		Fixtures:    o.fixtures,
		Evidence:    os.Stdout,
		Logger:      log,
		Metrics:     proc.Metrics,

		TracerProvider:  proc.Tracing.Provider(),
		SchemaAutoRaise: o.schemaAutoRaise,
	})
	if err != nil {
		if ctx.Err() != nil {
			log.Info("stopped before joining")
			return nil
		}
		return err
	}
	// The member serves from here: the self-fence watch counts a pause
	// from this moment, even one before its first step.
	serving := time.Now()
	ready.Joined(w.Member)
	log.Info("order-workflow started", "member", w.Member.ID(), "address", w.Member.Address(),
		"ops", ops.Addr(), "metrics", proc.MetricsAddr(), "fixtures", o.fixtures, "idleTimeout", o.idleTimeout.String(),
		"mailboxCapacity", o.limits.MailboxCapacity, "maxHosted", o.limits.MaxHosted, "maxActivations", o.limits.MaxActivations,
		"schema", workflow.Events.Schema, "schemaLevel", w.Schema.Level(), "schemaAutoRaise", o.schemaAutoRaise)

	// The watch ends with SIGTERM: a drain hands orders off through the
	// Location Store's own checks.
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	fenced := make(chan error, 1)
	go func() { fenced <- w.RunSelfFence(watchCtx, node.SelfFenceConfig{Lease: o.lease, Since: serving}) }()
	go w.RunSchemaGate(watchCtx)
	go func() {
		// Once this member's advertisement is out: orders that waited for a
		// build of its schema continue (ResumeReadable).
		select {
		case <-w.Member.Lookup.NamePublished():
		case <-watchCtx.Done():
			return
		}
		if n, err := w.ResumeReadable(watchCtx); err != nil && watchCtx.Err() == nil {
			log.Warn("resuming the orders that waited for this build's schema failed; `commerce-api admin stuck` lists them", "error", err)
		} else if n > 0 {
			log.Info("continued orders that waited for this build's schema", "orders", n)
		}
	}()
	go stores.RunReconciler(watchCtx, node.ReconcileConfig{Every: o.reconcileEvery, PruneAfter: o.pruneAfter, Logger: log})
	if o.retention > 0 {
		a, err := node.NewArchiver(stores, proc.Archive, node.ArchiverConfig{Retention: o.retention, Owner: w.Member.ID(), Logger: log})
		if err != nil {
			return err
		}
		log.Info("archiver running", "retention", o.retention.String(), "every", o.archiveEvery.String())
		go a.Run(watchCtx, o.archiveEvery)
	}
	select {
	case err := <-fenced:
		if err != nil {
			// Logged by the node as "self-fenced: ..."; no drain: the
			// orders stay where they are.
			log.Error("exiting for a restart as a new member", "exitCode", node.SelfFenceExitCode)
			return err
		}
	case <-ctx.Done():
	}
	stopWatch()
	ready.Draining()
	log.Info("draining")
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), o.drain)
	defer cancelDrain()
	if err := w.Drain(drainCtx); err != nil {
		// Orders not handed off stay Ready at this member and become
		// Unavailable; an operator resolves them.
		log.Warn("drain incomplete", "error", err)
	}
	log.Info("stopped")
	return nil
}
