package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	localcluster "github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

// A baseline run measures the binaries of another commit with the same
// bench, so two commits compare back to back on one machine. The commit's
// tree is exported with git archive (the working tree and the repository
// are left as they are) into a temporary directory, its two mains are
// built there, and the cluster is started through localcluster as for
// the working tree. What differs between commits is bridged here, for the
// baseline only:
//
//   - flags: localcluster passes the current binaries' flags, some of
//     which an older binary lacks (-admin-http, -ops-http before they
//     existed). Each baseline binary is started through a wrapper that
//     drops the flags the binary does not list in its -h output; flags the
//     cluster cannot do without (requiredFlags) must be there.
//   - metrics: a binary without /metrics that has -stats-file dumps its
//     Redis round trips on SIGUSR1 (SHOPPINGMALL_STATS_FILE in its
//     environment); CPU comes from procfs and Redis' own figures from
//     INFO commandstats for every binary anyway.
//   - the bounded wait: an API without GET ?waitFor=terminal is polled
//     (load.one detects it on the first answer).

// Where the mains live now; an older commit's are found by name
// (findMains).
const (
	apiMain      = "edge/cmd/commerce-api"
	workflowMain = "actors/cmd/order-workflow"
)

// requiredFlags are the flags a baseline binary must accept: without them
// localcluster's processes cannot find Redis, each other or their HTTP
// port. Every other flag it passes (listeners for admin, operations,
// metrics; timeouts) only adds to a run and is dropped when missing.
var requiredFlags = map[string][]string{
	"commerce-api":   {"node", "redis", "automanaged-port", "seeds", "http"},
	"order-workflow": {"node", "redis", "automanaged-port", "seeds"},
}

// statsFileFlag is the pre-/metrics flag whose dump replaces a scrape.
const statsFileFlag = "stats-file"

// wrapperArg is the bench's first argument when it runs as a baseline
// binary's wrapper (execFiltered).
const wrapperArg = "-baseline-exec"

// findMains picks the two mains among a commit's file paths: the current
// locations first, else the one directory named cmd/<name> holding a
// main.go.
func findMains(paths []string) (api, workflow string, err error) {
	has := map[string]bool{}
	for _, p := range paths {
		has[p] = true
	}
	find := func(current, name string) (string, error) {
		if has[current+"/main.go"] {
			return current, nil
		}
		var found []string
		for _, p := range paths {
			if dir := path.Dir(p); path.Base(p) == "main.go" && (dir == "cmd/"+name || strings.HasSuffix(dir, "/cmd/"+name)) {
				found = append(found, dir)
			}
		}
		switch len(found) {
		case 1:
			return found[0], nil
		case 0:
			return "", fmt.Errorf("no cmd/%s/main.go in the commit", name)
		}
		sort.Strings(found)
		return "", fmt.Errorf("more than one cmd/%s: %s", name, strings.Join(found, ", "))
	}
	if api, err = find(apiMain, "commerce-api"); err != nil {
		return "", "", err
	}
	workflow, err = find(workflowMain, "order-workflow")
	return api, workflow, err
}

var usageFlag = regexp.MustCompile(`^\s+-([A-Za-z0-9][A-Za-z0-9_.-]*)`)

// acceptedFlags reads the flag names out of a Go program's -h output
// (flag.PrintDefaults: "  -name type" then the indented usage).
func acceptedFlags(usage string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(usage, "\n") {
		if m := usageFlag.FindStringSubmatch(line); m != nil {
			out[m[1]] = true
		}
	}
	return out
}

// filterArgs keeps the arguments naming accepted flags and drops the
// others with their value: "-name=v", or "-name v" when the next
// argument is no flag (localcluster passes every value as its own
// argument, and no boolean flag is followed by a bare word). Everything
// after "--" is kept.
func filterArgs(args []string, accepted map[string]bool) (kept, dropped []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			kept = append(kept, args[i:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			kept = append(kept, a)
			continue
		}
		name, _, inline := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if accepted[name] {
			kept = append(kept, a)
			continue
		}
		dropped = append(dropped, a)
		if !inline && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			i++
			dropped = append(dropped, args[i])
		}
	}
	return kept, dropped
}

// execFiltered is the wrapper: args are the real binary, its accepted
// flags (comma separated), then the arguments localcluster passed. It
// replaces itself with the binary (same PID, so localcluster's signals
// and the CPU figures reach the binary), after saying on stderr, which is
// the node's log, what it dropped. It returns only on failure.
func execFiltered(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "bench "+wrapperArg+": want BINARY FLAGS [ARGS...]")
		return 2
	}
	bin := args[0]
	accepted := map[string]bool{}
	for _, f := range strings.Split(args[1], ",") {
		accepted[f] = true
	}
	kept, dropped := filterArgs(args[2:], accepted)
	if len(dropped) > 0 {
		fmt.Fprintf(os.Stderr, wrapperLine+"%s does not accept, dropped: %s\n", filepath.Base(bin), strings.Join(dropped, " "))
	}
	err := syscall.Exec(bin, append([]string{bin}, kept...), os.Environ())
	fmt.Fprintf(os.Stderr, wrapperLine+"exec %s: %v\n", bin, err)
	return 1
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// wrapperScript starts self (this bench) as the wrapper of bin.
func wrapperScript(self, bin string, accepted map[string]bool) string {
	return "#!/bin/sh\n# Written by the bench for a baseline run: starts " + filepath.Base(bin) +
		" with only the flags it accepts.\nexec " + shellQuote(self) + " " + wrapperArg + " " + shellQuote(bin) + " " +
		shellQuote(strings.Join(sortedKeys(accepted), ",")) + ` "$@"` + "\n"
}

// git runs git in the current directory (the repository make runs in).
func git(ctx context.Context, stdout io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, "git", args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// buildBaseline exports rev's tree, builds its mains into dir/bin and
// returns the target to measure: wrappers as binaries, and the stats
// file where the binaries have one.
func buildBaseline(ctx context.Context, rev, dir string) (target, error) {
	var out bytes.Buffer
	if err := git(ctx, &out, "rev-parse", "--verify", "--quiet", rev+"^{commit}"); err != nil {
		return target{}, fmt.Errorf("not a commit of this repository: %w", err)
	}
	commit := strings.TrimSpace(out.String())
	out.Reset()
	if err := git(ctx, &out, "ls-tree", "-r", "--name-only", commit); err != nil {
		return target{}, err
	}
	apiPkg, wfPkg, err := findMains(strings.Split(strings.TrimSpace(out.String()), "\n"))
	if err != nil {
		return target{}, err
	}
	src, err := os.MkdirTemp("", "bench-baseline-")
	if err != nil {
		return target{}, err
	}
	defer os.RemoveAll(src)
	logf("baseline %s: git archive into a temporary directory", commit[:12])
	pr, pw := io.Pipe()
	archiveDone := make(chan error, 1)
	go func() {
		err := git(ctx, pw, "archive", "--format=tar", commit)
		pw.CloseWithError(err)
		archiveDone <- err
	}()
	extractErr := untarAll(pr, src)
	// Unblocks git's writes whatever happened, so it exits before we go on.
	pr.CloseWithError(errors.New("extraction ended"))
	switch gitErr := <-archiveDone; {
	case extractErr != nil && gitErr != nil:
		return target{}, fmt.Errorf("extract: %w (%v)", extractErr, gitErr)
	case extractErr != nil:
		return target{}, fmt.Errorf("extract: %w", extractErr)
	case gitErr != nil:
		return target{}, gitErr
	}

	binDir := filepath.Join(dir, "bin")
	self, err := os.Executable()
	if err != nil {
		return target{}, fmt.Errorf("wrapper: %w", err)
	}
	t := target{Label: "baseline " + commit[:12], Commit: commit, Dir: dir}
	statsFile := true
	for _, b := range []struct{ name, pkg string }{{"commerce-api", apiPkg}, {"order-workflow", wfPkg}} {
		bin := filepath.Join(binDir, b.name)
		cmd := exec.CommandContext(ctx, "go", "build", "-buildvcs=false", "-o", bin, "./"+b.pkg)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GOWORK=off")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		logf("baseline: go build -o %s ./%s", bin, b.pkg)
		if err := cmd.Run(); err != nil {
			return target{}, fmt.Errorf("build %s: %w", b.pkg, err)
		}
		accepted, err := binaryFlags(ctx, bin)
		if err != nil {
			return target{}, err
		}
		var missing []string
		for _, f := range requiredFlags[b.name] {
			if !accepted[f] {
				missing = append(missing, "-"+f)
			}
		}
		if len(missing) > 0 {
			return target{}, fmt.Errorf("%s lacks %s, which the local cluster cannot start without: commit not supported",
				b.name, strings.Join(missing, ", "))
		}
		statsFile = statsFile && accepted[statsFileFlag]
		wrapper := bin + ".wrapper"
		if err := os.WriteFile(wrapper, []byte(wrapperScript(self, bin, accepted)), 0o755); err != nil {
			return target{}, err
		}
		if b.name == "commerce-api" {
			t.APIBin = wrapper
		} else {
			t.WfBin = wrapper
		}
		t.Notes = append(t.Notes, fmt.Sprintf("baseline %s (./%s) accepts: -%s", b.name, b.pkg, strings.Join(sortedKeys(accepted), " -")))
	}
	if statsFile {
		t.StatsFile = filepath.Join(dir, "stats", "{node}.json")
		if err := os.MkdirAll(filepath.Dir(t.StatsFile), 0o755); err != nil {
			return target{}, err
		}
		t.Env = append(t.Env, "SHOPPINGMALL_STATS_FILE="+t.StatsFile)
	}
	return t, nil
}

// binaryFlags runs bin -h and reads the flags it lists.
func binaryFlags(ctx context.Context, bin string) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "-h")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = localcluster.ChildEnv(os.Environ())
	_ = cmd.Run() // -h exits non-zero
	accepted := acceptedFlags(out.String())
	if len(accepted) == 0 {
		return nil, fmt.Errorf("%s -h listed no flags: %s", bin, strings.TrimSpace(out.String()))
	}
	return accepted, nil
}

// untarAll extracts the archive r carries into dir and reads r to its
// end: the end-of-archive marker is followed by padding tar does not
// read, and the writer (git) would block on it.
func untarAll(r io.Reader, dir string) error {
	if err := untar(r, dir); err != nil {
		return err
	}
	_, err := io.Copy(io.Discard, r)
	return err
}

// untar writes a git archive's regular files, directories and symlinks
// under dir, refusing any path that would leave it.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.FromSlash(path.Clean(h.Name))
		if !filepath.IsLocal(name) {
			if h.Typeflag == tar.TypeXGlobalHeader {
				continue
			}
			return fmt.Errorf("archive path %q leaves the directory", h.Name)
		}
		p := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		}
	}
}

// wrapperLine starts what the wrapper writes to a node's log.
const wrapperLine = "bench baseline wrapper: "

// droppedFlags reads from the nodes' logs which flags the wrapper dropped,
// by binary, without their values (ports differ by node).
func droppedFlags(logs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			rest, ok := strings.CutPrefix(line, wrapperLine)
			if !ok {
				continue
			}
			bin, flags, ok := strings.Cut(rest, " does not accept, dropped: ")
			if !ok {
				continue
			}
			var names []string
			for _, f := range strings.Fields(flags) {
				if strings.HasPrefix(f, "-") {
					names = append(names, f)
				}
			}
			note := fmt.Sprintf("baseline %s does not accept %s: the wrapper dropped it", bin, strings.Join(names, " "))
			if !seen[note] {
				seen[note] = true
				out = append(out, note)
			}
		}
	}
	return out
}

// statsPath expands the -stats-file pattern's {node} for one node.
func statsPath(pattern, node string) string {
	if pattern == "" {
		return ""
	}
	return strings.ReplaceAll(pattern, "{node}", node)
}

// statsDump is what a pre-/metrics process writes to its -stats-file.
type statsDump struct {
	PID               int              `json:"pid"`
	RedisRoundTrips   map[string]int64 `json:"redisRoundTrips"`
	WrittenAtUnixNano int64            `json:"writtenAtUnixNano"`
}

// signalDump asks pid for a dump (SIGUSR1) and waits, bounded, for one
// written after the request.
func signalDump(ctx context.Context, pid int, path string) (statsDump, error) {
	asked := time.Now().UnixNano()
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		return statsDump{}, fmt.Errorf("SIGUSR1 pid %d: %w", pid, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var st statsDump
		b, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(b, &st)
		}
		if err == nil && st.WrittenAtUnixNano >= asked {
			return st, nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = errors.New("no dump written after the request")
			}
			return statsDump{}, fmt.Errorf("stats dump of pid %d at %s: %w", pid, path, err)
		}
		select {
		case <-ctx.Done():
			return statsDump{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// dumpStore is the store label a stats dump's counters get: the dump
// counts all the process's stores together.
const dumpStore = "all"

// The stats dump's keys that are not command names.
const (
	dumpTotal     = "total"
	dumpCommands  = "commands"
	dumpPipelines = "pipelines"
	dumpConnSetup = "connSetup"
)

// scrapedFromDump presents a stats dump as the metrics a scrape would
// have served, so the report reads both alike.
func scrapedFromDump(rt map[string]int64) scraped {
	counter := func(v int64, labels ...string) *dto.Metric {
		m := &dto.Metric{Counter: &dto.Counter{Value: proto.Float64(float64(v))}}
		for i := 0; i+1 < len(labels); i += 2 {
			m.Label = append(m.Label, &dto.LabelPair{Name: proto.String(labels[i]), Value: proto.String(labels[i+1])})
		}
		return m
	}
	family := func(name string, ms ...*dto.Metric) *dto.MetricFamily {
		return &dto.MetricFamily{Name: proto.String(name), Type: dto.MetricType_COUNTER.Enum(), Metric: ms}
	}
	var cmds []*dto.Metric
	for _, k := range sortedKeys(rt) {
		switch k {
		case dumpTotal, dumpCommands, dumpPipelines, dumpConnSetup:
			continue
		}
		cmds = append(cmds, counter(rt[k], labelCommand, k, labelStore, dumpStore))
	}
	return scraped{
		metricRedisRoundTrips: family(metricRedisRoundTrips, counter(rt[dumpTotal], labelStore, dumpStore)),
		metricRedisCommands:   family(metricRedisCommands, cmds...),
		metricRedisPipelines:  family(metricRedisPipelines, counter(rt[dumpPipelines], labelStore, dumpStore)),
	}
}
