// Package partition cuts two local processes apart on loopback while both
// still reach every other process: the network partition of the partition
// test and, later, of the soak. Each process that may be cut starts in a
// cgroup v2 directory of its own (Cgroup, for localcluster.Config.Cgroup);
// Cut adds iptables rules to OUTPUT that drop every TCP packet a process of
// one side sends to a port the other side listens on, in both directions,
// so that new connections and open ones alike stop carrying anything.
// Heal removes exactly the rules Cut added, one by one; Close heals and
// removes the cgroup directories. No chain is flushed and no rule of
// anyone else is touched.
//
// Why cgroups: the processes share 127.0.0.1 and dial from ephemeral
// ports, so only the sending process tells a packet apart, and the
// cgroup match is the one iptables keeps for that. A socket keeps the
// cgroup it was opened in, so processes must start in theirs (clone3's
// CLONE_INTO_CGROUP, which localcluster uses); moving one later would
// leave its open connections uncut.
//
// It needs root, a cgroup v2 hierarchy and the iptables command with its
// cgroup match (Debian's iptables package; scripts/install-iptables.sh).
// It owns its rules and cgroups and nothing else; it imports no package of
// this module.
package partition

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrUnsupported: this machine cannot cut processes apart (no root, no
// cgroup v2, no iptables or its cgroup match).
var ErrUnsupported = errors.New("partition: unsupported here")

// Config configures a Net.
type Config struct {
	// Name tags the cgroup directory and every rule; default
	// "smpart-<pid>-<time>", unique per run.
	Name string
	// Logf receives each rule added and removed; nil discards.
	Logf func(format string, args ...any)
}

// Net is one run's partitions. Safe for concurrent use.
type Net struct {
	cfg   Config
	mount string // the cgroup2 mount point
	root  string // this run's directory under it
	mu    sync.Mutex
	dirs  map[string]string
	rules [][]string
}

// New finds the cgroup v2 hierarchy, checks iptables and makes this run's
// cgroup directory.
func New(cfg Config) (*Net, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: needs root", ErrUnsupported)
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return nil, fmt.Errorf("%w: no iptables (scripts/install-iptables.sh): %v", ErrUnsupported, err)
	}
	mount, err := cgroup2Mount()
	if err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		cfg.Name = fmt.Sprintf("smpart-%d-%d", os.Getpid(), time.Now().UnixNano())
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	root := filepath.Join(mount, cfg.Name)
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, fmt.Errorf("%w: cgroup %s: %v", ErrUnsupported, root, err)
	}
	return &Net{cfg: cfg, mount: mount, root: root, dirs: map[string]string{}}, nil
}

// cgroup2Mount is where the cgroup v2 hierarchy is mounted: /sys/fs/cgroup
// on a unified host, /sys/fs/cgroup/unified on a hybrid one.
func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ... mount-point ... - fstype source options
		fields := strings.Fields(sc.Text())
		for i, fl := range fields {
			if fl == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return fields[4], nil
			}
		}
	}
	return "", fmt.Errorf("%w: no cgroup2 hierarchy mounted", ErrUnsupported)
}

// Cgroup returns the cgroup directory of node, making it on first use:
// start node's process in it. It panics on a failure to make it, which New
// has ruled out for the parent.
func (n *Net) Cgroup(node string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if d, ok := n.dirs[node]; ok {
		return d
	}
	d := filepath.Join(n.root, node)
	if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		panic(fmt.Sprintf("partition: cgroup %s: %v", d, err))
	}
	n.dirs[node] = d
	return d
}

// Cut drops, from now until Heal, every TCP packet on loopback that the
// process of node a (PID aPID) sends to a port node b's process listens
// on, and the other way round. Both nodes must have started in their
// Cgroup. The listening ports are read now, from /proc.
func (n *Net) Cut(a string, aPID int, b string, bPID int) error {
	aPorts, err := ListeningPorts(aPID)
	if err != nil {
		return err
	}
	bPorts, err := ListeningPorts(bPID)
	if err != nil {
		return err
	}
	if len(aPorts) == 0 || len(bPorts) == 0 {
		return fmt.Errorf("partition: %s listens on %v, %s on %v: nothing to cut", a, aPorts, b, bPorts)
	}
	if err := n.drop(a, bPorts); err != nil {
		return err
	}
	return n.drop(b, aPorts)
}

func (n *Net) drop(from string, ports []int) error {
	rel, err := filepath.Rel(n.mount, n.Cgroup(from))
	if err != nil {
		return err
	}
	for len(ports) > 0 {
		// multiport takes at most 15 ports a rule.
		k := min(len(ports), 15)
		ps := make([]string, k)
		for i, p := range ports[:k] {
			ps[i] = strconv.Itoa(p)
		}
		ports = ports[k:]
		rule := []string{"OUTPUT", "-o", "lo", "-p", "tcp", "-m", "cgroup", "--path", rel,
			"-m", "multiport", "--dports", strings.Join(ps, ","),
			"-m", "comment", "--comment", n.cfg.Name, "-j", "DROP"}
		if err := iptables(append([]string{"-I"}, rule...)...); err != nil {
			return err
		}
		n.mu.Lock()
		n.rules = append(n.rules, rule)
		n.mu.Unlock()
		n.cfg.Logf("partition: drop %s -> ports %s", from, strings.Join(ps, ","))
	}
	return nil
}

// Heal removes every rule Cut added, by its exact specification.
func (n *Net) Heal() error {
	n.mu.Lock()
	rules := n.rules
	n.rules = nil
	n.mu.Unlock()
	var errs []error
	for _, r := range rules {
		if err := iptables(append([]string{"-D"}, r...)...); err != nil {
			errs = append(errs, err)
			continue
		}
		n.cfg.Logf("partition: removed %s", strings.Join(r, " "))
	}
	return errors.Join(errs...)
}

// Close heals and removes the cgroup directories. The processes started
// in them must have exited: a cgroup with a process in it cannot be
// removed, and Close reports it.
func (n *Net) Close() error {
	errs := []error{n.Heal()}
	n.mu.Lock()
	defer n.mu.Unlock()
	for node, d := range n.dirs {
		if err := rmdirWhenEmpty(d); err != nil {
			errs = append(errs, fmt.Errorf("partition: cgroup of %s: %w", node, err))
		}
		delete(n.dirs, node)
	}
	if err := rmdirWhenEmpty(n.root); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// rmdirWhenEmpty removes a cgroup directory, waiting briefly for the
// kernel to let go of processes that just exited.
func rmdirWhenEmpty(d string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := os.Remove(d)
		if err == nil || errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func iptables(args ...string) error {
	out, err := exec.Command("iptables", append([]string{"-w", "5"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("partition: iptables %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ListeningPorts returns the TCP ports process pid listens on: its
// sockets (/proc/<pid>/fd) matched against the LISTEN entries of
// /proc/<pid>/net/tcp and tcp6.
func ListeningPorts(pid int) ([]int, error) {
	fdDir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return nil, fmt.Errorf("partition: process %d: %w", pid, err)
	}
	inodes := map[string]bool{}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		if err != nil {
			continue
		}
		if in, ok := strings.CutPrefix(l, "socket:["); ok {
			inodes[strings.TrimSuffix(in, "]")] = true
		}
	}
	seen := map[int]bool{}
	for _, t := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/net/" + t)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local rem st tx:rx tr:when retr uid timeout inode
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] {
				continue
			}
			i := strings.LastIndexByte(f[1], ':')
			p, err := strconv.ParseInt(f[1][i+1:], 16, 32)
			if err == nil {
				seen[int(p)] = true
			}
		}
	}
	out := make([]int, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Ints(out)
	return out, nil
}
