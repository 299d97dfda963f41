package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
)

// takeoverReply is the reply of the takeover routes (edge.TakeoverReply),
// read loosely so the CLI does not depend on the server's package.
type takeoverReply struct {
	DryRun bool `json:"dryRun"`
	Orders []struct {
		OrderID       string `json:"orderId"`
		OperationID   string `json:"operationId"`
		Member        string `json:"member"`
		Node          string `json:"node"`
		OldGeneration int64  `json:"oldGeneration"`
		NewGeneration int64  `json:"newGeneration"`
		Outcome       string `json:"outcome"`
		OwnerLive     bool   `json:"ownerLive"`
	} `json:"orders"`
	Failed []struct {
		OrderID string `json:"orderId"`
		Error   struct {
			Code   string `json:"code"`
			Reason string `json:"reason"`
		} `json:"error"`
	} `json:"failed"`
}

// adminTakeover runs `commerce-api admin takeover -order ID | -member
// NAME`: it retires a lost owner's authority (fence, operation record,
// Location record reset) so the next command activates the order on a
// live member, and prints what was taken over. Exit status 1 when the
// call failed or any order of a member could not be taken over.
func adminTakeover(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("commerce-api admin takeover", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c adminClient
	c.register(fs)
	orderID := fs.String("order", "", "take over this OrderId")
	member := fs.String("member", "", "take over every order of this member id, or of every dead incarnation of this node name")
	dryRun := fs.Bool("dry-run", false, "list what would be taken over; change nothing")
	force := fs.Bool("force", false, "also evict a live owner (one behind a partition): its writes are refused from then on")
	scan := fs.Bool("scan", false, "with -member: also read every Location record, for records older than the per-member index")
	operation := fs.String("operation", "", "operation id (optional); repeating it finishes a half-done takeover")
	caller := fs.String("caller", "", "who asks, for the operation record (default: cli and $USER)")
	asJSON := fs.Bool("json", false, "print the server's JSON reply instead of a table")
	err := c.parse(fs, args)
	switch {
	case err != nil:
	case (*orderID == "") == (*member == ""):
		err = errors.New("give exactly one of -order and -member")
	case *scan && *member == "":
		err = errors.New("-scan goes with -member")
	}
	if err != nil {
		fmt.Fprintln(stderr, "commerce-api admin takeover:", err)
		return 2
	}
	if *caller == "" {
		*caller = strings.TrimSpace("cli " + os.Getenv("USER"))
	}
	q := url.Values{"caller": {*caller}}
	for name, on := range map[string]bool{"dryRun": *dryRun, "force": *force, "scan": *scan} {
		if on {
			q.Set(name, "true")
		}
	}
	if *operation != "" {
		q.Set("operationId", *operation)
	}
	path := "/admin/orders/" + url.PathEscape(*orderID) + "/takeover"
	if *member != "" {
		path = "/admin/members/" + url.PathEscape(*member) + "/takeover"
	}
	var rep takeoverReply
	b, ok := c.fetch("takeover", http.MethodPost, path+"?"+q.Encode(), &rep, stdout, stderr)
	if !ok {
		return 1
	}
	if *asJSON {
		fmt.Fprintln(stdout, strings.TrimSpace(string(b)))
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ORDER\tOWNER\tOLD GEN\tNEW GEN\tOPERATION\tOUTCOME")
		for _, o := range rep.Orders {
			owner := o.Node
			if owner == "" {
				owner = o.Member
			}
			if o.OwnerLive {
				owner += " (live, forced)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", o.OrderID, owner, o.OldGeneration, o.NewGeneration, o.OperationID, o.Outcome)
		}
		for _, f := range rep.Failed {
			fmt.Fprintf(tw, "%s\t\t\t\t\tfailed: %s %s\n", f.OrderID, f.Error.Code, f.Error.Reason)
		}
		_ = tw.Flush()
		verb := "taken over"
		if rep.DryRun {
			verb = "would be taken over (dry run)"
		}
		fmt.Fprintf(stdout, "%d orders %s, %d failed\n", len(rep.Orders), verb, len(rep.Failed))
	}
	if len(rep.Failed) > 0 {
		fmt.Fprintf(stderr, "commerce-api admin takeover: %d orders not taken over; repeat the call to retry them\n", len(rep.Failed))
		return 1
	}
	return 0
}
