package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"
)

// timelineReply is the reply of the timeline route (edge.TimelineReply),
// read loosely so the CLI does not depend on the server's package.
type timelineReply struct {
	OrderID string `json:"orderId"`
	State   *struct {
		Status string `json:"status"`
		Reason string `json:"reason"`
	} `json:"state"`
	StateVersion int64 `json:"stateVersion"`
	Authority    struct {
		Status     string `json:"status"`
		Member     string `json:"member"`
		Node       string `json:"node"`
		Generation int64  `json:"generation"`
	} `json:"authority"`
	Entries  []timelineEntry `json:"entries"`
	Archived *struct {
		SealedAtUnixMs   int64 `json:"sealedAtUnixMs"`
		ArchivedAtUnixMs int64 `json:"archivedAtUnixMs"`
		Version          int64 `json:"version"`
	} `json:"archived"`
}

type timelineEntry struct {
	AtUnixMs          int64  `json:"atUnixMs"`
	Kind              string `json:"kind"`
	Version           int64  `json:"version"`
	EventType         string `json:"eventType"`
	SourceCommandID   string `json:"sourceCommandId"`
	FenceGeneration   int64  `json:"fenceGeneration"`
	FenceEpoch        int64  `json:"fenceEpoch"`
	Change            string `json:"change"`
	Member            string `json:"member"`
	Node              string `json:"node"`
	Generation        int64  `json:"generation"`
	OperationID       string `json:"operationId"`
	OperationKind     string `json:"operationKind"`
	OperationState    string `json:"operationState"`
	Source            string `json:"source"`
	Target            string `json:"target"`
	NewGeneration     int64  `json:"newGeneration"`
	Caller            string `json:"caller"`
	Error             string `json:"error"`
	Effect            string `json:"effect"`
	EffectID          string `json:"effectId"`
	Result            string `json:"result"`
	Reason            string `json:"reason"`
	Calls             int64  `json:"calls"`
	Amount            int64  `json:"amount"`
	RecordedByVersion int64  `json:"recordedByVersion"`
	Unrecorded        bool   `json:"unrecorded"`
}

// adminTimeline runs `commerce-api admin timeline -order ID [-json]`: one
// order's events, ownership changes, operations and effects in time order,
// and its current state. Exit status 1 when the call failed (an unknown
// order is 404).
func adminTimeline(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("commerce-api admin timeline", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c adminClient
	c.register(fs)
	orderID := fs.String("order", "", "OrderId")
	asJSON := fs.Bool("json", false, "print the server's JSON reply instead of a table")
	err := c.parse(fs, args)
	if err == nil && *orderID == "" {
		err = errors.New("-order is required")
	}
	if err != nil {
		fmt.Fprintln(stderr, "commerce-api admin timeline:", err)
		return 2
	}
	var rep timelineReply
	b, ok := c.fetch("timeline", http.MethodGet, "/admin/orders/"+url.PathEscape(*orderID)+"/timeline", &rep, stdout, stderr)
	if !ok {
		return 1
	}
	if *asJSON {
		fmt.Fprintln(stdout, strings.TrimSpace(string(b)))
		return 0
	}
	printTimeline(stdout, &rep)
	return 0
}

func printTimeline(w io.Writer, rep *timelineReply) {
	state := "no projection"
	if rep.State != nil {
		state = fmt.Sprintf("%s (projection at version %d)", rep.State.Status, rep.StateVersion)
		if rep.State.Reason != "" {
			state += ": " + rep.State.Reason
		}
	}
	a := rep.Authority
	authority := fmt.Sprintf("%s at generation %d", a.Status, a.Generation)
	if owner := nodeOrMember(a.Node, a.Member); owner != "" {
		authority += ", owner " + owner
	}
	fmt.Fprintf(w, "order %s: %s; authority %s\n", rep.OrderID, state, authority)
	if a := rep.Archived; a != nil {
		fmt.Fprintf(w, "archived at %s (sealed at %s): the events below are the archive's, versions 1 to %d; its ownership history and operations left Redis with it\n",
			time.UnixMilli(a.ArchivedAtUnixMs).UTC().Format("2006-01-02 15:04:05.000"),
			time.UnixMilli(a.SealedAtUnixMs).UTC().Format("2006-01-02 15:04:05.000"), a.Version)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME (UTC)\tKIND\tWHAT\tGENERATION\tDETAIL")
	for _, e := range rep.Entries {
		what, gen, detail := describeEntry(e)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", time.UnixMilli(e.AtUnixMs).UTC().Format("2006-01-02 15:04:05.000"), e.Kind, what, gen, detail)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "%d entries\n", len(rep.Entries))
}

// describeEntry is an entry's WHAT, GENERATION and DETAIL columns.
func describeEntry(e timelineEntry) (what, gen, detail string) {
	switch e.Kind {
	case "event":
		return fmt.Sprintf("v%d %s", e.Version, e.EventType), fmt.Sprintf("fence %d.%d", e.FenceGeneration, e.FenceEpoch),
			"command " + e.SourceCommandID
	case "ownership":
		return e.Change, fmt.Sprint(e.Generation), nodeOrMember(e.Node, e.Member)
	case "operation":
		what = e.OperationKind + " " + e.OperationState
		gen = fmt.Sprint(e.Generation)
		if e.NewGeneration != 0 {
			gen += " -> " + fmt.Sprint(e.NewGeneration)
		}
		detail = e.Source + " -> " + e.Target
		if e.OperationKind == "takeover" {
			detail = "from " + nodeOrMember(e.Source, e.Member)
		}
		detail += " op " + e.OperationID
		if e.Caller != "" {
			detail += " by " + e.Caller
		}
		if e.Error != "" {
			detail += ": " + e.Error
		}
		return what, gen, detail
	case "effect":
		detail = e.Result
		if e.Reason != "" {
			detail += " (" + e.Reason + ")"
		}
		if e.Amount != 0 {
			detail += fmt.Sprintf(" amount %d", e.Amount)
		}
		detail += fmt.Sprintf(", %d calls", e.Calls)
		if e.Unrecorded {
			detail += ", not recorded in the stream yet"
		} else {
			detail += fmt.Sprintf(", recorded by v%d", e.RecordedByVersion)
		}
		return e.Effect + " " + e.EffectID, "", detail
	}
	return "", "", ""
}

func nodeOrMember(node, member string) string {
	switch {
	case node != "" && member != "":
		return node + " (" + member + ")"
	case node != "":
		return node
	}
	return member
}
