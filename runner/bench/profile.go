package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	localcluster "github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

// profileMaxSeconds bounds a CPU profile: long enough to see the steady
// state, short enough to fit inside the default closed loop.
const profileMaxSeconds = 8

// profiles are the CPU profiles fetched from every node during a closed
// loop.
type profiles struct {
	dir string
	wg  sync.WaitGroup
	mu  sync.Mutex
	// fetched maps a node to its profile's path, once fetched.
	fetched map[string]string
}

// startProfiles fetches a CPU profile from every node while the closed
// loop runs (an API's admin listener, a workflow's ops listener, both
// behind the cluster's token, as an operator would) into dir/<node>.pprof.
// wait waits for the fetches; writeTops, called once the run's figures are
// taken, adds `go tool pprof -top` of each in <node>.top.txt: those tools
// take seconds of CPU, which inside the loop would be measured as the
// cluster's (a dip of a third of the throughput for two seconds). Failures
// are logged, not returned: a profile is a diagnostic, the run's figures
// do not need it. Redis is not a Go process and has no profile here.
func startProfiles(ctx context.Context, dir string, c *localcluster.Cluster, loop time.Duration) *profiles {
	var nodes []profiledNode
	for _, n := range append(append([]string{}, localcluster.APINodes...), localcluster.WorkflowNodes...) {
		base := c.AdminURL(n)
		if base == "" {
			base = c.OpsURL(n)
		}
		nodes = append(nodes, profiledNode{name: n, base: base})
	}
	return fetchProfiles(ctx, dir, nodes, c.AdminToken(), loop)
}

// profiledNode is a node and the base URL of its /debug/pprof/.
type profiledNode struct{ name, base string }

func fetchProfiles(ctx context.Context, dir string, nodes []profiledNode, token string, loop time.Duration) *profiles {
	p := &profiles{dir: dir, fetched: map[string]string{}}
	if dir == "" {
		return p
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		logf("profiles: %v", err)
		return p
	}
	// Leave a margin at both ends of the loop: ramp-up and the last
	// orders draining are not the steady state.
	secs := profileMaxSeconds
	if loop > 0 {
		secs = min(secs, max(1, int((loop-2*time.Second)/time.Second)))
	}
	for _, n := range nodes {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			out := filepath.Join(dir, n.name+".pprof")
			if err := fetchProfile(ctx, n.base, token, secs, out); err != nil {
				logf("profile %s: %v", n.name, err)
				return
			}
			logf("profile %s: %s (%ds)", n.name, out, secs)
			p.mu.Lock()
			p.fetched[n.name] = out
			p.mu.Unlock()
		}()
	}
	return p
}

// wait waits for the fetches.
func (p *profiles) wait() { p.wg.Wait() }

// writeTops writes <node>.top.txt beside each fetched profile, one node
// at a time.
func (p *profiles) writeTops(ctx context.Context) {
	p.wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	for n, out := range p.fetched {
		if err := writeTop(ctx, out, filepath.Join(p.dir, n+".top.txt")); err != nil {
			logf("profile %s: top: %v", n, err)
		}
	}
}

func fetchProfile(ctx context.Context, base, token string, secs int, out string) error {
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, secs)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: time.Duration(secs+15) * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeTop saves the flat and cumulative top entries, the form the
// before/after comparison of a cut quotes.
func writeTop(ctx context.Context, profile, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, args := range [][]string{
		{"tool", "pprof", "-top", "-nodecount=25", profile},
		{"tool", "pprof", "-top", "-cum", "-nodecount=25", profile},
	} {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Run(); err != nil {
			return err
		}
		fmt.Fprintln(f)
	}
	return nil
}
