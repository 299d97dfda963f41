// Command shoppingmall-client is Client/Program (docs/contract.md,
// "Components"): it reads the fixtures file the smoke runner wrote and runs
// the client scenario once through the public order API.
//
//	shoppingmall-client -fixtures fixtures.json
//
// It prints shoppingmall=completed only when every assertion passed;
// otherwise it prints the failed assertion and the last state it saw and
// exits 1. Like runner/client it imports nothing but that package.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/shoppingmall-go/shoppingmall/runner/client"
)

func main() {
	path := flag.String("fixtures", "", "fixtures JSON written by the smoke runner (required)")
	flag.Parse()
	if *path == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: shoppingmall-client -fixtures fixtures.json")
		os.Exit(2)
	}
	fx, err := client.LoadFixtures(*path)
	if err != nil {
		fmt.Printf("shoppingmall-client: %v\n", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := client.NewScenario(fx, nil, os.Stdout).Run(ctx); err != nil {
		fmt.Printf("shoppingmall-client: FAILED %v\n", err)
		var ae *client.AssertionError
		if errors.As(err, &ae) {
			last := ae.Last
			if last == "" {
				last = "(none)"
			}
			fmt.Printf("shoppingmall-client: last state seen: %s\n", last)
		}
		os.Exit(1)
	}
	fmt.Println("shoppingmall=completed")
}
