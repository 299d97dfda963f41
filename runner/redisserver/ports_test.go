package redisserver

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// holderEnv makes the test binary, re-run as a child, reserve the ports
// of the range it names ("lo-hi"), print them, and wait to be killed.
const holderEnv = "REDISSERVER_TEST_HOLD_PORTS"

func TestHoldPortsHelper(t *testing.T) {
	spec := os.Getenv(holderEnv)
	if spec == "" {
		t.Skip("only run as the child of TestAPortReservedByAnotherProcessIsNotHandedOut")
	}
	a, b, _ := strings.Cut(spec, "-")
	lo, _ := strconv.Atoi(a)
	hi, _ := strconv.Atoi(b)
	ports, err := freePortsIn(lo, hi, hi-lo+1)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("held", len(ports))
	time.Sleep(time.Hour)
}

// Two test processes reserve ports at once (make runs packages side by
// side): a port one of them reserved is refused to the other for as long
// as the first lives, though nothing is bound to it, and it is free again
// the moment the first is SIGKILLed.
func TestAPortReservedByAnotherProcessIsNotHandedOut(t *testing.T) {
	lo, hi := explicitPortRange()
	var start int
	var child *exec.Cmd
	for attempt := 0; attempt < 20 && child == nil; attempt++ {
		start = lo + (attempt*997+int(time.Now().UnixNano()%1000))%(hi-lo-10)
		cmd := exec.Command(os.Args[0], "-test.run=^TestHoldPortsHelper$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d-%d", holderEnv, start, start+4))
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		line, _ := bufio.NewReader(out).ReadString('\n')
		if strings.HasPrefix(line, "held 5") {
			child = cmd
			break
		}
		// Some port of the range is in use on this machine: try another.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	require.NotNil(t, child, "no range of five free ports found")
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })

	_, err := freePortsIn(start, start+4, 1)
	require.Error(t, err, "a port held by the other process was handed out")

	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()
	ports, err := freePortsIn(start, start+4, 5)
	require.NoError(t, err, "the killed process's reservations outlived it")
	require.Len(t, ports, 5)

	// And this process does not hand out its own reservations twice.
	_, err = freePortsIn(start, start+4, 1)
	require.Error(t, err)
}
