package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/node/procflags"
	"github.com/shoppingmall-go/shoppingmall/cluster/redisurl"
)

const seedUsage = `usage: order-workflow seed (-demo | -file seed.json) [-redis URL] [-redis-commerce URL] [-timeout 2m]
Writes carts, stock and payment methods (commerce.LoadSeed JSON, or the
demo catalogue) into the CommerceStateStore's Redis and exits: 0 once
written. Redis not answering yet is retried until -timeout. Flags also come
from SHOPPINGMALL_<FLAG>, as the process's own do.`

// seedOptions are the flags of `order-workflow seed`.
type seedOptions struct {
	redis, redisCommerce string
	file                 string
	demo                 bool
	timeout              time.Duration
}

func parseSeed(args []string, stderr io.Writer) (seedOptions, error) {
	var o seedOptions
	fs := flag.NewFlagSet("order-workflow seed", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, seedUsage); fs.PrintDefaults() }
	fs.StringVar(&o.redis, "redis", "redis://127.0.0.1:6390/0", "default Redis URL for every store, as the process's -redis")
	fs.StringVar(&o.redisCommerce, "redis-commerce", "", "CommerceStateStore Redis URL (default -redis)")
	fs.StringVar(&o.file, "file", "", "seed file (commerce.LoadSeed JSON)")
	fs.BoolVar(&o.demo, "demo", false, "write the demo catalogue (carts cart-demo-ok and cart-demo-nostock, methods pm-demo-ok and pm-demo-declined)")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up once Redis has not taken the seed for this long")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if err := procflags.EnvDefaults(fs); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("seed: unexpected arguments %q", fs.Args())
	}
	if o.demo == (o.file != "") {
		return o, errors.New("seed: give one of -demo and -file")
	}
	if o.timeout <= 0 {
		return o, errors.New("seed: -timeout must be positive")
	}
	return o, nil
}

// loadSeed reads the seed the options name.
func (o seedOptions) load() (commerce.Seed, string, error) {
	if o.demo {
		return commerce.DemoSeed(), "the demo catalogue", nil
	}
	f, err := os.Open(o.file)
	if err != nil {
		return commerce.Seed{}, "", err
	}
	defer f.Close()
	s, err := commerce.LoadSeed(f)
	return s, o.file, err
}

// runSeed is `order-workflow seed`.
func runSeed(args []string, stdout, stderr io.Writer) error {
	o, err := parseSeed(args, stderr)
	if err != nil {
		return err
	}
	s, from, err := o.load()
	if err != nil {
		return err
	}
	url := cmp.Or(o.redisCommerce, o.redis)
	rc, err := redisurl.NewClient(url, redisurl.Options{})
	if err != nil {
		return err
	}
	defer rc.Close()
	store, err := commerce.NewRedis(commerce.Config{Client: rc})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	if err := store.ApplySeedRetrying(ctx, s, func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "seeded %d carts, %d SKUs, %d payment methods from %s\n", len(s.Carts), len(s.Stock), len(s.Methods), from)
	return nil
}
