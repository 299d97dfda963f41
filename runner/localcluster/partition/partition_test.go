package partition

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// helperEnv makes the test binary a helper process: "listen" listens on a
// loopback port and prints it; "dial:<port>" dials that port every 50 ms
// and prints "ok" or "fail".
const helperEnv = "PARTITION_TEST_HELPER"

func TestMain(m *testing.M) {
	switch h := os.Getenv(helperEnv); {
	case h == "listen":
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			os.Exit(2)
		}
		fmt.Println(l.Addr().(*net.TCPAddr).Port)
		for {
			c, err := l.Accept()
			if err == nil {
				_ = c.Close()
			}
		}
	case strings.HasPrefix(h, "dial:"):
		for {
			c, err := net.DialTimeout("tcp", "127.0.0.1:"+strings.TrimPrefix(h, "dial:"), 200*time.Millisecond)
			if err == nil {
				_ = c.Close()
				fmt.Println("ok")
			} else {
				fmt.Println("fail")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	os.Exit(m.Run())
}

// helper starts the test binary as a helper inside cgroup dir and returns
// it with its stdout lines.
func helper(t *testing.T, dir, mode string) (*exec.Cmd, <-chan string) {
	t.Helper()
	f, err := os.Open(dir)
	require.NoError(t, err)
	defer f.Close()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd()), Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	return cmd, lines
}

// next waits for the helper to print want, draining what it printed
// before.
func next(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case l := <-lines:
			if l == want {
				return
			}
		case <-deadline:
			t.Fatalf("no %q from the helper", want)
		}
	}
}

// A cut stops the two processes' packets to each other and nothing else;
// Heal removes exactly its rules and Close its cgroups.
func TestCutDropsOnlyTheTwoProcessesPacketsAndHealRemovesItsRules(t *testing.T) {
	n, err := New(Config{Logf: t.Logf})
	require.NoError(t, err, "needs root, cgroup v2 and iptables (scripts/install-iptables.sh)")
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = n.Close()
		}
	})
	a, aOut := helper(t, n.Cgroup("a"), "listen")
	port := <-aOut
	_, err = strconv.Atoi(port)
	require.NoError(t, err, "port %q", port)
	var ports []int
	require.Eventually(t, func() bool {
		ports, err = ListeningPorts(a.Process.Pid)
		return err == nil && len(ports) == 1
	}, 5*time.Second, 20*time.Millisecond)
	require.Equal(t, port, strconv.Itoa(ports[0]))
	b, bOut := helper(t, n.Cgroup("b"), "dial:"+port)
	next(t, bOut, "ok")

	// b listens on nothing: Cut needs ports on both sides.
	require.Error(t, n.Cut("a", a.Process.Pid, "b", b.Process.Pid))
	// With one more listener on b's side, b's dials to a fail, while this
	// process (in neither cgroup) still reaches a.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, n.Cut("a", a.Process.Pid, "b", os.Getpid()))
	next(t, bOut, "fail")
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
	require.NoError(t, err, "a process outside the cut still reaches a")
	_ = c.Close()

	require.NoError(t, n.Heal())
	next(t, bOut, "ok")
	rules, err := exec.Command("iptables", "-w", "5", "-S", "OUTPUT").CombinedOutput()
	require.NoError(t, err, "%s", rules)
	require.NotContains(t, string(rules), n.cfg.Name, "a rule of the cut is left")

	_ = a.Process.Kill()
	_ = b.Process.Kill()
	_ = a.Wait()
	_ = b.Wait()
	closed = true
	require.NoError(t, n.Close())
	_, err = os.Stat(n.root)
	require.ErrorIs(t, err, os.ErrNotExist, "the cgroups are removed")
}
