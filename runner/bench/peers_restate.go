package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	localcluster "github.com/shoppingmall-go/shoppingmall/runner/localcluster"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// The Restate peer (`make bench-peers`): restate-server, the order
// workflow as a Restate virtual object (runner/peers/restate, a Go module
// of its own built here with the go tool) and a Redis for its inventory
// and payment modules, all started by the bench and stopped by PID.
//
// An order is StartOrder = POST <ingress>/Order/{orderId}/Place/send with
// an idempotency-key header, answered 202 once the invocation is durably
// in Restate's log (the order will run to its end from there: Restate's
// counterpart of our 201 Created), then the outcome =
// GET <ingress>/restate/invocation/{invocationId}/attach, which answers
// once the handler has returned the terminal status. No polling either.

// restateVersion is the restate-server the Makefile installs from npm.
const restateVersion = "1.7.12"

// Restate's addresses of the peer: object, handler.
const (
	restateObject  = "Order"
	restateHandler = "Place"
)

// restateStack is one running Restate peer.
type restateStack struct {
	dir     string
	ingress string
	admin   string
	redis   *redisserver.Server
	server  *exec.Cmd
	service *exec.Cmd
	logs    map[string]string
	exited  map[string]chan struct{}
}

// Process names in the CPU figures.
const (
	cpuRestateServer = "restate-server"
	cpuRestateSvc    = "order-restate"
	cpuRedis         = "redis-server"
)

// startRestate builds the peer service, starts Redis, restate-server and
// the service in dir and registers the service. On failure everything
// started is stopped again.
func startRestate(ctx context.Context, o options, dir string) (st *restateStack, err error) {
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return nil, err
	}
	bin, err := restateServerBin(o.peer.restateServer)
	if err != nil {
		return nil, err
	}
	svcBin := filepath.Join(dir, "bin", "order-restate")
	if err := buildRestatePeer(ctx, o.peer.restatePeerDir, svcBin); err != nil {
		return nil, err
	}
	ports, err := freeLocalPorts(5)
	if err != nil {
		return nil, err
	}
	st = &restateStack{
		dir:     dir,
		ingress: "http://127.0.0.1:" + strconv.Itoa(ports[1]),
		admin:   "http://127.0.0.1:" + strconv.Itoa(ports[2]),
		logs:    map[string]string{},
		exited:  map[string]chan struct{}{},
	}
	defer func() {
		if err != nil {
			st.stop()
			st = nil
		}
	}()
	// The modules' Redis is the one ours runs on by default: AOF,
	// appendfsync everysec, its main thread favored as ours' is.
	st.redis, err = redisserver.Start(ctx, redisserver.Config{
		Dir: filepath.Join(dir, "redis"), Port: ports[0], Persist: true, LogFile: filepath.Join(dir, "redis.log"),
		Nice: localcluster.RedisNice,
	})
	if err != nil {
		return nil, fmt.Errorf("restate peer: redis: %w", err)
	}
	logf("restate peer: redis-server pid=%d url=%s", st.redis.PID(), st.redis.URL())

	cfgPath := filepath.Join(dir, "restate.toml")
	if err := os.WriteFile(cfgPath, []byte(restateConfig(filepath.Join(dir, "restate-data"), ports[1], ports[2], ports[3])), 0o644); err != nil {
		return nil, err
	}
	// restate-server runs as shipped, at the ordinary priority: at nice
	// -10 (its log, state and invoker ahead of the service it calls) it
	// made 205.7 orders/s at 8.76 ms of CPU per order, against 335.8 and
	// 4.98 at 0 (docs/performance.md).
	if st.server, err = st.spawn(cpuRestateServer, bin, "--config-file", cfgPath, "--no-logo"); err != nil {
		return nil, err
	}
	logf("restate peer: restate-server %s pid=%d ingress=%s admin=%s", restateVersion, st.server.Process.Pid, st.ingress, st.admin)
	if err := st.waitHTTP(ctx, cpuRestateServer, st.admin+"/health", 90*time.Second); err != nil {
		return nil, err
	}
	if err := st.waitHTTP(ctx, cpuRestateServer, st.ingress+"/restate/health", 30*time.Second); err != nil {
		return nil, err
	}
	svcAddr := "127.0.0.1:" + strconv.Itoa(ports[4])
	if st.service, err = st.spawn(cpuRestateSvc, svcBin, "-listen", svcAddr, "-redis-url", st.redis.URL()); err != nil {
		return nil, err
	}
	logf("restate peer: order-restate pid=%d on %s", st.service.Process.Pid, svcAddr)
	if err := st.register(ctx, "http://"+svcAddr); err != nil {
		return nil, err
	}
	return st, nil
}

// restateConfig is restate-server's configuration: its own data directory
// and loopback ports, no telemetry, no web UI, warnings only. Everything
// else, durability included, stays at the release's defaults.
func restateConfig(baseDir string, ingress, admin, node int) string {
	return fmt.Sprintf(`# Written by runner/bench for the Restate peer run.
base-dir = %q
node-name = "bench"
disable-telemetry = true
log-filter = "warn"
listen-mode = "tcp"
bind-address = "127.0.0.1:%d"
advertised-address = "http://127.0.0.1:%d/"

[ingress]
bind-address = "127.0.0.1:%d"

[admin]
bind-address = "127.0.0.1:%d"
disable-web-ui = true
`, baseDir, node, node, ingress, admin)
}

// restateServerBin finds restate-server: the given path, or one in PATH.
func restateServerBin(given string) (string, error) {
	name := given
	if name == "" {
		name = "restate-server"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("restate-server not found (%v): `make bench-peers` installs @restatedev/restate-server@%s from npm and passes -restate-server", err, restateVersion)
	}
	out, err := exec.Command(p, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", p, err)
	}
	if v := strings.TrimSpace(string(out)); !strings.Contains(v, restateVersion) {
		logf("restate peer: %s is %q, not %s: figures are for that version", p, v, restateVersion)
	}
	return p, nil
}

// buildRestatePeer builds the peer module (its own go.mod) with the go
// tool found in PATH, outside any workspace.
func buildRestatePeer(ctx context.Context, peerDir, out string) error {
	abs, err := filepath.Abs(peerDir)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, ".")
	cmd.Dir = abs
	cmd.Env = append(os.Environ(), "GOWORK=off")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	logf("restate peer: go build -o %s (in %s)", out, abs)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build the Restate peer in %s: %w", abs, err)
	}
	return nil
}

// spawn starts a process with its output in <dir>/<name>.log, in a
// process group of its own so that a ^C to the bench reaches it only
// through stop.
func (st *restateStack) spawn(name, bin string, args ...string) (*exec.Cmd, error) {
	logPath := filepath.Join(st.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = st.dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	st.logs[name], st.exited[name] = logPath, done
	return cmd, nil
}

// waitHTTP waits until url answers 200, failing early if the process
// exits.
func (st *restateStack) waitHTTP(ctx context.Context, name, url string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-st.exited[name]:
			return fmt.Errorf("%s exited before %s answered:\n%s", name, url, tail(st.logs[name], 20))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s did not answer 200 within %s:\n%s", name, url, limit, tail(st.logs[name], 20))
		}
	}
}

// register registers the service deployment with the admin API, retrying
// while the service is not listening yet.
func (st *restateStack) register(ctx context.Context, uri string) error {
	body, _ := json.Marshal(map[string]any{"uri": uri, "force": true})
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, st.admin+"/deployments", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		var msg []byte
		if err == nil {
			msg, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				logf("restate peer: deployment %s registered", uri)
				return nil
			}
			err = fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
		}
		select {
		case <-st.exited[cpuRestateSvc]:
			return fmt.Errorf("order-restate exited:\n%s", tail(st.logs[cpuRestateSvc], 20))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("register %s with restate-server: %w", uri, err)
		}
	}
}

// pids names the processes whose CPU the run counts.
func (st *restateStack) pids() map[string]int {
	return map[string]int{
		cpuRestateServer: st.server.Process.Pid,
		cpuRestateSvc:    st.service.Process.Pid,
		cpuRedis:         st.redis.PID(),
	}
}

// stop stops what startRestate started, by PID: the service, then
// restate-server (SIGTERM, SIGKILL after a grace), then Redis.
func (st *restateStack) stop() {
	for _, p := range []struct {
		name string
		cmd  *exec.Cmd
	}{{cpuRestateSvc, st.service}, {cpuRestateServer, st.server}} {
		if p.cmd == nil || p.cmd.Process == nil {
			continue
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-st.exited[p.name]:
		case <-time.After(15 * time.Second):
			logf("restate peer: %s pid=%d did not stop on SIGTERM: killed", p.name, p.cmd.Process.Pid)
			_ = p.cmd.Process.Kill()
			<-st.exited[p.name]
		}
	}
	if st.redis != nil {
		if err := st.redis.Stop(); err != nil {
			logf("restate peer: stop redis: %v", err)
		}
	}
}

// restateOrderID is the order's id, the virtual object's key. The client
// must name the key, so it is derived from the idempotency key: a
// repeated start reaches the same object (and Restate's idempotency
// table answers it) as a repeated key reaches the same order in ours.
func restateOrderID(idempotencyKey string) string {
	sum := sha256.Sum256([]byte(idempotencyKey))
	return "ord-" + hex.EncodeToString(sum[:])[:20]
}

// restatePlaceReq is the Place handler's input (runner/peers/restate
// PlaceReq).
type restatePlaceReq struct {
	CartID            string `json:"cartId"`
	ShippingAddressID string `json:"shippingAddressId"`
	PaymentMethodID   string `json:"paymentMethodId"`
	IdempotencyKey    string `json:"idempotencyKey"`
}

// restateOutcome is the Place handler's output (Outcome).
type restateOutcome struct {
	OrderID string `json:"orderId"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
}

// restateClient sends orders to a Restate ingress, over the load's own
// HTTP client so that both targets reuse connections the same way.
type restateClient struct {
	ingress string
	client  *http.Client
}

// one runs order n against Restate: send, then attach. Latencies are
// taken as in load.one: from scheduled when set, else from the send.
func (rc *restateClient) one(ctx context.Context, l *load, n int64, phaseStart, scheduled time.Time) orderResult {
	path, body := l.startRequest(n)
	req := restatePlaceReq(body)
	id := restateOrderID(req.IdempotencyKey)
	b, _ := json.Marshal(req)
	sent := time.Now()
	t0 := scheduled
	if t0.IsZero() {
		t0 = sent
	}
	r := orderResult{Path: path, OrderID: id, Start: t0.Sub(phaseStart), StartLag: sent.Sub(t0)}
	octx, cancel := context.WithDeadline(ctx, sent.Add(l.cfg.PollTimeout))
	defer cancel()
	code, raw, err := rc.do(octx, http.MethodPost, rc.ingress+"/"+restateObject+"/"+id+"/"+restateHandler+"/send", b,
		map[string]string{"idempotency-key": req.IdempotencyKey})
	r.StartLat = time.Since(t0)
	if err != nil {
		r.Err = "send: " + err.Error()
		return r
	}
	var acc struct {
		InvocationID string `json:"invocationId"`
		Status       string `json:"status"`
	}
	if code != http.StatusAccepted && code != http.StatusOK {
		r.Err = fmt.Sprintf("send: status %d: %s", code, bytes.TrimSpace(raw))
		return r
	}
	if err := json.Unmarshal(raw, &acc); err != nil || acc.InvocationID == "" {
		r.Err = fmt.Sprintf("send: no invocation id in %q", raw)
		return r
	}
	r.Status = "Accepted"
	r.Waits++
	code, raw, err = rc.do(octx, http.MethodGet, rc.ingress+"/restate/invocation/"+acc.InvocationID+"/attach", nil, nil)
	if err != nil {
		r.Err = "attach: " + err.Error()
		return r
	}
	if code != http.StatusOK {
		r.Err = fmt.Sprintf("attach %s: status %d: %s", acc.InvocationID, code, bytes.TrimSpace(raw))
		return r
	}
	var out restateOutcome
	if err := json.Unmarshal(raw, &out); err != nil {
		r.Err = fmt.Sprintf("attach %s: %v", acc.InvocationID, err)
		return r
	}
	r.Status = out.Status
	if !r.terminal() {
		r.Err = fmt.Sprintf("attach %s answered status %q", acc.InvocationID, out.Status)
		return r
	}
	r.E2E = time.Since(t0)
	return r
}

func (rc *restateClient) do(ctx context.Context, method, url string, body []byte, headers map[string]string) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := rc.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// freeLocalPorts picks n free loopback ports below the ephemeral range
// (redisserver.FreePorts), so that no outgoing connection takes one
// between the pick and the listen.
func freeLocalPorts(n int) ([]int, error) { return redisserver.FreePorts(n) }

// tail is the last n lines of a log file, for an error message.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
