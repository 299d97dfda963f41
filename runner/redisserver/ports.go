package redisserver

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// portLocks holds the lock file of every port this process reserved. The
// files stay open, and so locked, until the process exits: a reserved port
// is free between its check and its process's bind, and again while a
// killed node waits to be restarted on it, and only the lock keeps another
// test process, running beside this one, from picking it meanwhile.
var portLocks struct {
	sync.Mutex
	held map[int]*os.File
}

// FreePorts reserves n distinct free TCP ports on 127.0.0.1 for the
// caller's processes to bind, from below the kernel's ephemeral range
// (where no outgoing connection or port-0 listener takes one meanwhile).
// A candidate counts when its lock file in PortLockDir can be locked and
// the port can be bound; the bind is released at once, the lock is held
// until this process exits, so concurrent callers in other processes never
// hand out the same port while this one may still bind it.
func FreePorts(n int) ([]int, error) {
	lo, hi := explicitPortRange()
	return freePortsIn(lo, hi, n)
}

// freePortsIn is FreePorts over the ports lo..hi.
func freePortsIn(lo, hi, n int) ([]int, error) {
	dir := PortLockDir()
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("redisserver: port lock folder: %w", err)
	}
	portLocks.Lock()
	defer portLocks.Unlock()
	if portLocks.held == nil {
		portLocks.held = make(map[int]*os.File)
	}
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 200*n {
			return nil, fmt.Errorf("redisserver: no %d free ports in %d-%d", n, lo, hi)
		}
		p := lo + rand.IntN(hi-lo+1)
		if _, mine := portLocks.held[p]; mine {
			continue
		}
		f, err := lockPort(dir, p)
		if err != nil {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			f.Close()
			continue
		}
		l.Close()
		portLocks.held[p] = f
		ports = append(ports, p)
	}
	return ports, nil
}

// PortLockDir is the folder of the ports' lock files, shared by every
// process of the machine that reserves ports through FreePorts.
func PortLockDir() string { return filepath.Join(os.TempDir(), "shoppingmall-ports") }

// errPortTaken: another process holds the port's lock.
var errPortTaken = errors.New("redisserver: port reserved by another process")

// lockPort takes the port's lock file without waiting. The lock is the
// kernel's (flock), so it goes with the process that held it, however
// that process ends: a SIGKILLed test leaves no reservation behind.
func lockPort(dir string, port int) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)+".lock"), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errPortTaken
		}
		return nil, err
	}
	return f, nil
}

// explicitPortRange is from 10000 up to just below the kernel's ephemeral
// ports (32768 when it cannot be read).
func explicitPortRange() (lo, hi int) {
	lo, hi = 10000, 32767
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return lo, hi
	}
	if first, err := strconv.Atoi(f[0]); err == nil && first-1 > lo+1000 {
		hi = first - 1
	}
	return lo, hi
}
