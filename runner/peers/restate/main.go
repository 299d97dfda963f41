// Command order-restate is the peer of `make bench-peers`: ShoppingMall's
// order workflow as a Restate virtual object keyed by OrderId (Order,
// handler Place), served with Restate's Go SDK for a restate-server to
// call. It runs the same domain (actors/order) against the same inventory
// and payment modules (actors/commerce) on a Redis of its own, so the
// effects and their deterministic ids are those of the real workflow;
// only the durability machinery differs (workflow.go).
//
// It is a Go module of its own, so that the SDK stays out of the main
// module's go.mod; the main module comes in through a replace directive
// pointing at this repository. runner/bench starts it, registers it with
// restate-server and drives it (peers_restate.go there); nothing in the
// main module imports it.
//
// It owns nothing but its listener and its Redis client; it must not
// import actors/workflow, actors/grain, cluster, edge or eventstore.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/restatedev/sdk-go/server"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/cluster/redisurl"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9080", "address restate-server calls the service on (HTTP/2 cleartext)")
	redisURL := flag.String("redis-url", "", "Redis of the inventory and payment modules (redis:// or unix://)")
	pool := flag.Int("redis-pool", 64, "Redis connections")
	flag.Parse()
	if err := run(*listen, *redisURL, *pool); err != nil {
		fmt.Fprintln(os.Stderr, "order-restate:", err)
		os.Exit(1)
	}
}

func run(listen, redisURL string, pool int) error {
	if redisURL == "" {
		return fmt.Errorf("-redis-url is required")
	}
	rdb, err := redisurl.NewClient(redisURL, redisurl.Options{PoolSize: pool})
	if err != nil {
		return fmt.Errorf("-redis-url: %w", err)
	}
	defer func() { _ = rdb.Close() }()
	store, err := commerce.NewRedis(commerce.Config{Client: rdb})
	if err != nil {
		return err
	}
	w := &workflow{carts: store.Carts(), inventory: store.Inventory(), payment: store.Payment()}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Warnings only: a log line per invocation would be CPU the
	// comparison charges to Restate.
	logger := slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})
	srv := server.NewRestate().WithLogger(logger, true).Bind(w.definition())
	fmt.Printf("order-restate serving %s/%s on %s\n", ObjectName, PlaceHandler, listen)
	return srv.Start(ctx, listen)
}
