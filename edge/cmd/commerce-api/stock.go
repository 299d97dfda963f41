package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// stockReply is the reply of the stock route (edge.StockReply), read
// loosely so the CLI does not depend on the server's package.
type stockReply struct {
	SKU       string `json:"sku"`
	Available int64  `json:"available"`
	Movements []struct {
		Kind          string `json:"kind"`
		Delta         int64  `json:"delta"`
		Available     int64  `json:"available"`
		Requested     int64  `json:"requested"`
		ReservationID string `json:"reservationId"`
		OrderID       string `json:"orderId"`
		AtUnixMs      int64  `json:"atUnixMs"`
	} `json:"movements"`
}

// adminStock runs `commerce-api admin stock -sku SKU [-limit N] [-json]`:
// a SKU's available stock and its latest ledger movements, newest first.
// Exit status 1 when the call failed (a SKU never stocked is 404).
func adminStock(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("commerce-api admin stock", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c adminClient
	c.register(fs)
	sku := fs.String("sku", "", "SKU")
	limit := fs.Int("limit", 0, "how many of the latest movements (server default 20, at most 200)")
	asJSON := fs.Bool("json", false, "print the server's JSON reply instead of a table")
	err := c.parse(fs, args)
	if err == nil && *sku == "" {
		err = errors.New("-sku is required")
	}
	if err != nil {
		fmt.Fprintln(stderr, "commerce-api admin stock:", err)
		return 2
	}
	path := "/admin/stock/" + url.PathEscape(*sku)
	if *limit != 0 {
		path += "?limit=" + strconv.Itoa(*limit)
	}
	var rep stockReply
	b, ok := c.fetch("stock", http.MethodGet, path, &rep, stdout, stderr)
	if !ok {
		return 1
	}
	if *asJSON {
		fmt.Fprintln(stdout, strings.TrimSpace(string(b)))
		return 0
	}
	fmt.Fprintf(stdout, "sku %s: %d available\n", rep.SKU, rep.Available)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME (UTC)\tKIND\tDELTA\tAVAILABLE\tRESERVATION\tORDER")
	for _, m := range rep.Movements {
		kind := m.Kind
		if m.Requested != 0 {
			kind += fmt.Sprintf(" (requested %d)", m.Requested)
		}
		fmt.Fprintf(tw, "%s\t%s\t%+d\t%d\t%s\t%s\n", time.UnixMilli(m.AtUnixMs).UTC().Format("2006-01-02 15:04:05.000"),
			kind, m.Delta, m.Available, m.ReservationID, m.OrderID)
	}
	_ = tw.Flush()
	fmt.Fprintf(stdout, "%d movements, newest first\n", len(rep.Movements))
	return 0
}
