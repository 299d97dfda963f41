// Command commerce-api runs CommerceApi: the HTTP edge of the sample, a
// member of the shoppingmall.workflow cluster that hosts no grains.
//
//	commerce-api -node api-a -http 127.0.0.1:8081 -redis redis://127.0.0.1:6390/0 \
//	    -provider automanaged -automanaged-port 6331 -seeds 127.0.0.1:6331,...
//	commerce-api admin relocate -api http://127.0.0.1:8081 -order <id> [-target workflow-b]
//	commerce-api admin close -api http://127.0.0.1:8081 -order <id>
//
// Every flag can also be set from the environment as SHOPPINGMALL_<FLAG>
// (upper case, '-' as '_'); a flag on the command line wins. Evidence lines
// go to stdout, logs to stderr.
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
	"time"

	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/actors/node/procflags"
	"github.com/shoppingmall-go/shoppingmall/edge/edgenode"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "admin" {
		os.Exit(admin(os.Args[2:], os.Stdout, os.Stderr))
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "commerce-api:", err)
		os.Exit(1)
	}
}

type options struct {
	procflags.Common
	httpAddr                        string
	selfCheck, admin                bool
	requestTimeout, shutdownTimeout time.Duration
}

func parse(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("commerce-api", flag.ContinueOnError)
	o.Register(fs, "api-a", 6331)
	fs.StringVar(&o.httpAddr, "http", "127.0.0.1:8081", "HTTP listen address")
	fs.BoolVar(&o.selfCheck, "self-check", false, "enable the runner-only /self-check/ hooks")
	fs.BoolVar(&o.admin, "admin", false, "enable /admin/ operations")
	fs.DurationVar(&o.requestTimeout, "request-timeout", 10*time.Second, "bound of one HTTP request")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 15*time.Second, "bound of a graceful stop")
	return o, o.Parse(fs, args)
}

func run(args []string) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

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
	ready := node.NewReadiness(stores)
	interim, err := node.ServeInterim(ln, edgenode.StartingHandler(ready), log)
	if err != nil {
		_ = ln.Close()
		return err
	}
	log.Info("http listening; starting", "http", ln.Addr().String())
	if err := proc.WaitStores(ctx); err != nil {
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
	api, err := edgenode.Start(joinCtx, edgenode.Config{
		Cluster:        o.Cluster(log),
		Stores:         stores,
		RequestTimeout: o.requestTimeout,
		SelfCheck:      o.selfCheck,
		Admin:          o.admin,
		Evidence:       os.Stdout,
		Logger:         log,
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
	log.Info("commerce-api started", "http", ln.Addr().String(), "member", api.Member.ID(),
		"selfCheck", o.selfCheck, "admin", o.admin)

	served := make(chan error, 1)
	go func() { served <- api.Server.Serve(ln) }()

	select {
	case <-ctx.Done():
		log.Info("stopping")
	case err := <-served:
		log.Error("http server ended", "error", err)
	}
	shutCtx, cancelShut := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancelShut()
	if err := api.Stop(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("graceful stop incomplete", "error", err)
	}
	log.Info("stopped")
	return nil
}

// admin runs `commerce-api admin relocate|close`: it calls the API's
// /admin/ endpoint and prints the JSON reply. Exit status 0 on 2xx, 1 on
// an error reply, 2 on a usage error.
func admin(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "relocate" && args[0] != "close") {
		fmt.Fprintln(stderr, "usage: commerce-api admin relocate|close -api URL -order ID [-target NODE] [-operation ID]")
		return 2
	}
	op := args[0]
	fs := flag.NewFlagSet("commerce-api admin "+op, flag.ContinueOnError)
	fs.SetOutput(stderr)
	api := fs.String("api", "http://127.0.0.1:8081", "CommerceApi base URL")
	orderID := fs.String("order", "", "OrderId")
	timeout := fs.Duration("timeout", 30*time.Second, "request timeout")
	var target, operation *string
	if op == "relocate" {
		target = fs.String("target", "", "target workflow node (optional)")
		operation = fs.String("operation", "", "relocation operation id (optional)")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if err := procflags.EnvDefaults(fs); err != nil || *orderID == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "commerce-api admin: -order is required", err)
		return 2
	}
	body := "{}"
	if op == "relocate" {
		body = fmt.Sprintf(`{"targetNode":%s,"operationId":%s}`, jsonString(*target), jsonString(*operation))
	}
	u := strings.TrimRight(*api, "/") + "/admin/orders/" + url.PathEscape(*orderID) + "/" + op
	client := &http.Client{Timeout: *timeout}
	res, err := client.Post(u, "application/json", strings.NewReader(body))
	if err != nil {
		fmt.Fprintln(stderr, "commerce-api admin:", err)
		return 1
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		fmt.Fprintln(stderr, "commerce-api admin:", err)
		return 1
	}
	fmt.Fprintln(stdout, strings.TrimSpace(string(b)))
	if res.StatusCode/100 != 2 {
		fmt.Fprintln(stderr, "commerce-api admin:", res.Status)
		return 1
	}
	return 0
}

func jsonString(s string) string {
	b, _ := json.Marshal(s) // a Go string always encodes
	return string(b)
}
