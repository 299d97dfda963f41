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

// startProfiles fetches a CPU profile from every node while the closed
// loop runs (an API's admin listener, a workflow's ops listener, both
// behind the cluster's token, as an operator would) and writes each to
// dir/<node>.pprof with `go tool pprof -top` beside it in <node>.top.txt.
// The returned function waits for the fetches; failures are logged, not
// returned: a profile is a diagnostic, the run's figures do not need it.
// Redis is not a Go process and has no profile here.
func startProfiles(ctx context.Context, dir string, c *localcluster.Cluster, loop time.Duration) (wait func()) {
	if dir == "" {
		return func() {}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		logf("profiles: %v", err)
		return func() {}
	}
	// Leave a margin at both ends of the loop: ramp-up and the last
	// orders draining are not the steady state.
	secs := profileMaxSeconds
	if loop > 0 {
		secs = min(secs, max(1, int((loop-2*time.Second)/time.Second)))
	}
	var wg sync.WaitGroup
	for _, n := range append(append([]string{}, localcluster.APINodes...), localcluster.WorkflowNodes...) {
		base := c.AdminURL(n)
		if base == "" {
			base = c.OpsURL(n)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := filepath.Join(dir, n+".pprof")
			if err := fetchProfile(ctx, base, c.AdminToken(), secs, out); err != nil {
				logf("profile %s: %v", n, err)
				return
			}
			if err := writeTop(ctx, out, filepath.Join(dir, n+".top.txt")); err != nil {
				logf("profile %s: top: %v", n, err)
				return
			}
			logf("profile %s: %s (%ds)", n, out, secs)
		}()
	}
	return wg.Wait
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
