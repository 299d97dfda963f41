// Command prestop waits the duration it is given and exits 0: the
// Kubernetes preStop hook of the images (scripts/deploy), whose empty base
// has no sleep. The delay lets Service endpoints drop the pod before the
// process gets SIGTERM and drains.
//
//	prestop 5s
//
// It must not import any package of this module: it is a timer.
package main

import (
	"fmt"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: prestop DURATION")
		os.Exit(2)
	}
	d, err := time.ParseDuration(os.Args[1])
	if err != nil || d < 0 {
		fmt.Fprintln(os.Stderr, "prestop: want a duration such as 5s")
		os.Exit(2)
	}
	time.Sleep(d)
}
