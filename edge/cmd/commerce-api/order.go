package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/shoppingmall-go/shoppingmall/edge"
	"github.com/shoppingmall-go/shoppingmall/edge/apiclient"
)

const orderUsage = `usage: commerce-api order place|get|wait|continue [flags]
  place    -cart CART -address ADDR -method PAYMENT_METHOD [-key KEY] [-wait [-timeout 30s]]
  get      ORDER_ID
  wait     ORDER_ID [-timeout 30s]
  continue ORDER_ID [-command-id ID]
every subcommand: -api URL (the API's public address; default $SHOPPINGMALL_PUBLIC_API, else http://127.0.0.1:8081)
exit status: 0 done, 1 refused (4xx), 2 usage, 3 unavailable or timed out (5xx, no answer, wait ran out)`

// Exit statuses of `commerce-api order`.
const (
	exitOK          = 0
	exitRefused     = 1
	exitUsage       = 2
	exitUnavailable = 3
)

const (
	// defaultPublicAPI is commerce-api's own -http default.
	defaultPublicAPI = "http://127.0.0.1:8081"
	// envPublicAPI sets -api. It is not SHOPPINGMALL_API: the admin
	// subcommands read every flag from SHOPPINGMALL_<FLAG>, so that name
	// would send them, and their token, to the public address.
	envPublicAPI = "SHOPPINGMALL_PUBLIC_API"
	// orderRequestTimeout bounds one request, beyond a wait's own time.
	orderRequestTimeout = 30 * time.Second
	// maxWaitSlice is the longest wait the server grants.
	maxWaitSlice = edge.MaxWaitMs * time.Millisecond
)

// order runs `commerce-api order <subcommand>`: it speaks the public order
// API through the generated client (edge/apiclient) and prints the
// server's reply on stdout, a one-line summary on stderr.
func order(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, orderUsage)
		return exitUsage
	}
	switch args[0] {
	case "place":
		return orderPlace(args[1:], stdout, stderr)
	case "get":
		return orderGet(args[1:], stdout, stderr)
	case "wait":
		return orderWait(args[1:], stdout, stderr)
	case "continue":
		return orderContinue(args[1:], stdout, stderr)
	default:
		fmt.Fprintln(stderr, orderUsage)
		return exitUsage
	}
}

// orderClient is the part every order subcommand shares: the public
// address and the generated client on it.
type orderClient struct {
	cmd    string // "place", ...: names the subcommand in messages
	api    string
	client *apiclient.Client
	stdout io.Writer
	stderr io.Writer
}

func newOrderCmd(cmd string, stdout, stderr io.Writer) (*flag.FlagSet, *orderClient) {
	fs := flag.NewFlagSet("commerce-api order "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &orderClient{cmd: cmd, stdout: stdout, stderr: stderr}
	fs.StringVar(&c.api, "api", "", "the API's public base URL (default $"+envPublicAPI+", else "+defaultPublicAPI+")")
	return fs, c
}

// parse parses the flags, and with withID the one ORDER_ID argument,
// which may stand before or after the flags.
func (c *orderClient) parse(fs *flag.FlagSet, args []string, withID bool) (string, error) {
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	var id string
	if withID {
		if fs.NArg() == 0 {
			return "", errors.New("an ORDER_ID is required")
		}
		id = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return "", err
		}
		if strings.TrimSpace(id) == "" {
			return "", errors.New("the ORDER_ID is empty")
		}
	}
	if fs.NArg() > 0 {
		return "", fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.api == "" {
		c.api = os.Getenv(envPublicAPI)
	}
	if c.api == "" {
		c.api = defaultPublicAPI
	}
	cl, err := apiclient.NewClient(c.api)
	if err != nil {
		return "", fmt.Errorf("-api %q: %w", c.api, err)
	}
	c.client = cl
	return id, nil
}

func (c *orderClient) usage(err error) int {
	fmt.Fprintf(c.stderr, "commerce-api order %s: %v\n", c.cmd, err)
	return exitUsage
}

// reply is one answer of the API: its status, headers and body as sent.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// call runs one generated-client call within timeout and reads the reply.
// The client's plain methods are used, not its ...WithResponse ones: an
// error reply is kept as sent, whatever shape its body has.
func call(timeout time.Duration, do func(ctx context.Context) (*http.Response, error)) (reply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := do(ctx)
	if err != nil {
		return reply{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return reply{}, err
	}
	return reply{status: res.StatusCode, header: res.Header, body: b}, nil
}

// failed reports a request that got no 2xx answer and returns the exit
// status: a transport error or a 5xx is 3 (with hint, how to retry), any
// other answer 1. An error
// reply's body goes to stdout as the server sent it (its code and reason
// are what a script reads), the summary to stderr.
func (c *orderClient) failed(r reply, err error, hint string) int {
	if err != nil {
		fmt.Fprintf(c.stderr, "commerce-api order %s: no answer from %s: %v%s\n", c.cmd, c.api, err, hint)
		return exitUnavailable
	}
	if len(bytes.TrimSpace(r.body)) > 0 {
		fmt.Fprintln(c.stdout, strings.TrimSpace(string(r.body)))
	}
	msg := fmt.Sprintf("%d %s", r.status, http.StatusText(r.status))
	e := errorSummaryOf(r.body)
	if e.Code != "" {
		msg += ": " + e.Code
	}
	if e.Reason != "" {
		msg += " (reason " + e.Reason + ")"
	}
	if e.Field != "" {
		msg += " field " + e.Field
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if ra := r.header.Get("Retry-After"); ra != "" {
		if _, err := strconv.Atoi(ra); err == nil {
			ra += "s"
		}
		msg += "; retry after " + ra
	}
	if r.status < 500 {
		// A refusal is not retried as it stands: no hint.
		fmt.Fprintf(c.stderr, "commerce-api order %s: %s\n", c.cmd, msg)
		return exitRefused
	}
	fmt.Fprintf(c.stderr, "commerce-api order %s: %s%s\n", c.cmd, msg, hint)
	return exitUnavailable
}

// errorSummary is what the CLI reads of an error reply.
type errorSummary struct {
	Code, Reason, Field, Message string
}

// errorSummaryOf reads an error body of either shape the API has sent: an
// RFC 9457 problem (application/problem+json: type, title, status,
// detail, with the members code, reason and field) or the earlier
// {"error":{code,message,reason,field}}. Anything else gives the zero
// summary; the status line still stands.
func errorSummaryOf(body []byte) errorSummary {
	var problem struct {
		Title  string `json:"title"`
		Detail string `json:"detail"`
		Code   string `json:"code"`
		Reason string `json:"reason"`
		Field  string `json:"field"`
	}
	if json.Unmarshal(body, &problem) == nil && problem.Code != "" {
		msg := problem.Detail
		if msg == "" {
			msg = problem.Title
		}
		return errorSummary{Code: problem.Code, Reason: problem.Reason, Field: problem.Field, Message: msg}
	}
	var nested struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Reason  string `json:"reason"`
			Field   string `json:"field"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &nested) == nil && nested.Error.Code != "" {
		e := nested.Error
		return errorSummary{Code: e.Code, Reason: e.Reason, Field: e.Field, Message: e.Message}
	}
	return errorSummary{}
}

// printJSON prints a 2xx reply on stdout, indented, and decodes it into v.
func (c *orderClient) printJSON(r reply, v any) error {
	if err := json.Unmarshal(r.body, v); err != nil {
		return fmt.Errorf("decode the %d reply: %w", r.status, err)
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, bytes.TrimSpace(r.body), "", "  "); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, buf.String())
	return nil
}

func (c *orderClient) badReply(err error) int {
	fmt.Fprintf(c.stderr, "commerce-api order %s: %v\n", c.cmd, err)
	return exitUnavailable
}

func terminal(s apiclient.OrderStatus) bool {
	return s == apiclient.Confirmed || s == apiclient.Failed
}

// stateLine is the one-line summary of an order's state.
func stateLine(s apiclient.OrderState) string {
	line := "order " + s.OrderId + " " + string(s.Status)
	if s.Reason != nil && *s.Reason != "" {
		line += " (" + *s.Reason + ")"
	}
	return line
}

// orderPlace runs `commerce-api order place`: POST /orders with an
// Idempotency-Key, a fresh one unless -key names one; the key is printed,
// so that a request without an answer is retried with -key and starts no
// second order. With -wait it then waits for the outcome like order wait.
func orderPlace(args []string, stdout, stderr io.Writer) int {
	fs, c := newOrderCmd("place", stdout, stderr)
	cart := fs.String("cart", "", "CartId")
	address := fs.String("address", "", "ShippingAddressId")
	method := fs.String("method", "", "PaymentMethodId")
	key := fs.String("key", "", "Idempotency-Key (default a fresh UUID; printed, so that a retry reuses it)")
	wait := fs.Bool("wait", false, "then wait for the order to be Confirmed or Failed")
	timeout := fs.Duration("timeout", maxWaitSlice, "with -wait: how long to wait for the outcome")
	_, err := c.parse(fs, args, false)
	if err == nil {
		var missing []string
		for _, f := range []struct{ name, v string }{{"-cart", *cart}, {"-address", *address}, {"-method", *method}} {
			if strings.TrimSpace(f.v) == "" {
				missing = append(missing, f.name)
			}
		}
		if len(missing) > 0 {
			err = fmt.Errorf("%s required", strings.Join(missing, ", "))
		}
	}
	if err == nil && *timeout <= 0 {
		err = errors.New("-timeout must be positive")
	}
	if err != nil {
		return c.usage(err)
	}
	if *key == "" {
		*key = uuid.NewString()
	}
	hint := "; retry with -key " + *key
	body := apiclient.StartOrderReq{CartId: *cart, ShippingAddressId: *address, PaymentMethodId: *method}
	r, err := call(orderRequestTimeout, func(ctx context.Context) (*http.Response, error) {
		return c.client.StartOrder(ctx, &apiclient.StartOrderParams{IdempotencyKey: key}, body)
	})
	if err != nil || r.status/100 != 2 {
		return c.failed(r, err, hint)
	}
	var res apiclient.StartOrderRes
	if *wait {
		if err := json.Unmarshal(r.body, &res); err != nil {
			return c.badReply(fmt.Errorf("decode the %d reply: %w", r.status, err))
		}
	} else if err := c.printJSON(r, &res); err != nil {
		return c.badReply(err)
	}
	placed := "placed"
	if r.status == http.StatusOK {
		placed = "already placed with this key"
	}
	fmt.Fprintf(stderr, "commerce-api order place: %s: %s (idempotency key %s)\n", placed, stateLine(res.State), *key)
	if !*wait {
		return exitOK
	}
	return c.waitTerminal(res.OrderId, *timeout)
}

// orderGet runs `commerce-api order get ORDER_ID`: GET /orders/{id}.
func orderGet(args []string, stdout, stderr io.Writer) int {
	fs, c := newOrderCmd("get", stdout, stderr)
	id, err := c.parse(fs, args, true)
	if err != nil {
		return c.usage(err)
	}
	r, err := call(orderRequestTimeout, func(ctx context.Context) (*http.Response, error) {
		return c.client.GetOrder(ctx, id, &apiclient.GetOrderParams{})
	})
	if err != nil || r.status != http.StatusOK {
		return c.failed(r, err, "")
	}
	var res apiclient.GetOrderStateRes
	if err := c.printJSON(r, &res); err != nil {
		return c.badReply(err)
	}
	fmt.Fprintln(stderr, "commerce-api order get:", stateLine(res.State))
	return exitOK
}

// orderWait runs `commerce-api order wait ORDER_ID [-timeout 30s]`.
func orderWait(args []string, stdout, stderr io.Writer) int {
	fs, c := newOrderCmd("wait", stdout, stderr)
	timeout := fs.Duration("timeout", maxWaitSlice, "how long to wait for the order to be Confirmed or Failed")
	id, err := c.parse(fs, args, true)
	if err == nil && *timeout <= 0 {
		err = errors.New("-timeout must be positive")
	}
	if err != nil {
		return c.usage(err)
	}
	return c.waitTerminal(id, *timeout)
}

// waitTerminal asks GET /orders/{id}?waitFor=terminal&timeoutMs=N until the
// order is Confirmed or Failed or timeout has passed: the server bounds
// one wait (edge.MaxWaitMs), so a longer one takes several. It prints the
// last state; one that is still not terminal exits 3.
func (c *orderClient) waitTerminal(id string, timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	for {
		slice := min(time.Until(deadline), maxWaitSlice)
		ms := max(int((slice+time.Millisecond-1)/time.Millisecond), 0) // rounded up
		waitFor := apiclient.Terminal
		asked := time.Now()
		r, err := call(slice+orderRequestTimeout, func(ctx context.Context) (*http.Response, error) {
			return c.client.GetOrder(ctx, id, &apiclient.GetOrderParams{WaitFor: &waitFor, TimeoutMs: &ms})
		})
		if err != nil || r.status != http.StatusOK {
			return c.failed(r, err, "")
		}
		var res apiclient.GetOrderStateRes
		if err := json.Unmarshal(r.body, &res); err != nil {
			return c.badReply(fmt.Errorf("decode the %d reply: %w", r.status, err))
		}
		done := terminal(res.State.Status)
		if !done && time.Now().Before(deadline) {
			// A wait answered well before its time (the server began
			// shutting down) is asked again after a pause, not at once.
			if time.Since(asked) < slice/2 {
				time.Sleep(min(200*time.Millisecond, time.Until(deadline)))
			}
			if time.Now().Before(deadline) {
				continue
			}
		}
		if err := c.printJSON(r, &res); err != nil {
			return c.badReply(err)
		}
		if !done {
			fmt.Fprintf(c.stderr, "commerce-api order %s: %s, not Confirmed or Failed after %s\n", c.cmd, stateLine(res.State), timeout)
			return exitUnavailable
		}
		fmt.Fprintf(c.stderr, "commerce-api order %s: %s\n", c.cmd, stateLine(res.State))
		return exitOK
	}
}

// orderContinue runs `commerce-api order continue ORDER_ID`: POST
// /orders/{id}/continue, which drives the order a step further (or reports
// it terminal). -command-id makes a retry the same command.
func orderContinue(args []string, stdout, stderr io.Writer) int {
	fs, c := newOrderCmd("continue", stdout, stderr)
	commandID := fs.String("command-id", "", "the command's id, for a retry (default a fresh one, chosen by the server)")
	id, err := c.parse(fs, args, true)
	if err != nil {
		return c.usage(err)
	}
	var body apiclient.ContinueOrderWorkflowReq
	if *commandID != "" {
		body.SourceCommandId = commandID
	}
	r, err := call(orderRequestTimeout, func(ctx context.Context) (*http.Response, error) {
		return c.client.ContinueOrder(ctx, id, &apiclient.ContinueOrderParams{}, body)
	})
	if err != nil || r.status != http.StatusOK {
		return c.failed(r, err, "")
	}
	var res apiclient.ContinueOrderWorkflowRes
	if err := c.printJSON(r, &res); err != nil {
		return c.badReply(err)
	}
	fmt.Fprintln(stderr, "commerce-api order continue:", stateLine(res.State))
	return exitOK
}
