package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// schemaLevel is a level record of the schema routes (location.SchemaLevel),
// read loosely so the CLI does not depend on the server's packages.
type schemaLevel struct {
	Level          int    `json:"level"`
	RaisedBy       string `json:"raisedBy"`
	RaisedAtUnixMs int64  `json:"raisedAtUnixMs"`
	Auto           bool   `json:"auto"`
	From           int    `json:"from"`
}

func (l schemaLevel) String() string {
	if l.RaisedBy == "" {
		return fmt.Sprintf("%d (never raised)", l.Level)
	}
	how := "raised by " + l.RaisedBy
	if l.Auto {
		how = "raised by itself on " + l.RaisedBy
	}
	return fmt.Sprintf("%d (from %d, %s at %s)", l.Level, l.From, how,
		time.UnixMilli(l.RaisedAtUnixMs).UTC().Format("2006-01-02 15:04:05 UTC"))
}

// schemaReport is the reply of GET /admin/schema (compat.Report).
type schemaReport struct {
	Level   schemaLevel   `json:"level"`
	History []schemaLevel `json:"history"`
	Members []struct {
		MemberID   string `json:"memberId"`
		Node       string `json:"node"`
		Schema     int    `json:"schema"`
		Advertised bool   `json:"advertised"`
		Workflow   bool   `json:"workflow"`
	} `json:"members"`
	Readable int `json:"readable"`
}

// adminSchema runs `commerce-api admin schema [-json]`, the compatibility
// level and what every member reads, and `commerce-api admin schema raise
// -to N [-by NAME] [-json]`. Exit status 1 when the call failed (a raise
// that a live workflow member does not read is 409 FAILED_PRECONDITION).
func adminSchema(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "raise" {
		return adminSchemaRaise(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("commerce-api admin schema", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c adminClient
	c.register(fs)
	asJSON := fs.Bool("json", false, "print the server's JSON reply instead of a table")
	if err := c.parse(fs, args); err != nil {
		fmt.Fprintln(stderr, "commerce-api admin schema:", err)
		return 2
	}
	var rep schemaReport
	b, ok := c.fetch("schema", http.MethodGet, "/admin/schema", &rep, stdout, stderr)
	if !ok {
		return 1
	}
	if *asJSON {
		fmt.Fprintln(stdout, strings.TrimSpace(string(b)))
		return 0
	}
	fmt.Fprintf(stdout, "compatibility level %s\n", rep.Level)
	if rep.Readable > 0 {
		fmt.Fprintf(stdout, "every live workflow member reads up to schema %d\n", rep.Readable)
	} else {
		fmt.Fprintln(stdout, "no live workflow member")
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tMEMBER\tROLE\tREADS UP TO")
	for _, m := range rep.Members {
		role, reads := "published, not live", "-"
		switch {
		case m.Workflow:
			role = "live workflow"
		case m.Schema == 0:
			role = "hosts no orders"
		}
		if m.Schema > 0 {
			reads = fmt.Sprint(m.Schema)
			if !m.Advertised {
				reads += " (assumed: advertises nothing)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.Node, m.MemberID, role, reads)
	}
	_ = tw.Flush()
	for i, h := range rep.History {
		if i == 0 {
			fmt.Fprintln(stdout, "changes, newest first:")
		}
		fmt.Fprintf(stdout, "  %s\n", h)
	}
	return 0
}

// adminSchemaRaise runs `commerce-api admin schema raise`.
func adminSchemaRaise(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("commerce-api admin schema raise", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c adminClient
	c.register(fs)
	to := fs.Int("to", 0, "the level to raise to: a schema every live workflow member reads")
	by := fs.String("by", defaultRaiser(), "who raises it, recorded with the level")
	asJSON := fs.Bool("json", false, "print the server's JSON reply")
	err := c.parse(fs, args)
	if err == nil && *to < 1 {
		err = errors.New("-to is required: a schema version, 1 or above")
	}
	if err != nil {
		fmt.Fprintln(stderr, "commerce-api admin schema raise:", err)
		return 2
	}
	body, err := json.Marshal(map[string]any{"to": *to, "by": *by})
	if err != nil {
		fmt.Fprintln(stderr, "commerce-api admin schema raise:", err)
		return 2
	}
	var rep struct {
		Level  schemaLevel `json:"level"`
		Raised bool        `json:"raised"`
	}
	b, ok := c.send("schema raise", http.MethodPost, "/admin/schema/raise", string(body), &rep, stdout, stderr)
	if !ok {
		return 1
	}
	if *asJSON {
		fmt.Fprintln(stdout, strings.TrimSpace(string(b)))
		return 0
	}
	if rep.Raised {
		fmt.Fprintf(stdout, "raised: compatibility level %s\n", rep.Level)
	} else {
		fmt.Fprintf(stdout, "unchanged: compatibility level %s\n", rep.Level)
	}
	return 0
}

// defaultRaiser is the operator's login name, "operator" without one.
func defaultRaiser() string {
	for _, v := range []string{"USER", "LOGNAME"} {
		if u := strings.TrimSpace(os.Getenv(v)); u != "" {
			return u
		}
	}
	return "operator"
}
