// Command soakcheck re-checks a saved soak history offline:
//
//	soakcheck history.json
//
// It prints the invariant report and exits 1 on any violation, 2 when the
// history cannot be read. It owns only this command line; the checking is
// runner/soak/check's.
package main

import (
	"fmt"
	"os"

	"github.com/shoppingmall-go/shoppingmall/runner/soak/check"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: soakcheck history.json")
		os.Exit(2)
	}
	h, err := check.LoadHistory(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "soakcheck:", err)
		os.Exit(2)
	}
	rep := check.Check(h)
	fmt.Print(rep.String())
	if !rep.OK() {
		ids := rep.OffendingOrders()
		for _, id := range ids {
			fmt.Print(h.Describe(id))
		}
		fmt.Printf("FAIL: %d offending orders\n", len(ids))
		os.Exit(1)
	}
	fmt.Println("OK")
}
