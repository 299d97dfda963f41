package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Where a refusal waits (issue 49, point 3). The server measures a shed
// from the admission middleware on, so a client that sees it a second
// later lost that second elsewhere: in the kernel's accept queue (a
// connection the API has not accepted yet), in a SYN dropped because that
// queue was full (the client retransmits it after a second), in request
// bytes the API has not read yet (its goroutine waits for a core), or in
// answer bytes the generator has not read yet (the generator waits for a
// core). The overload phase samples the first, third and fourth from
// /proc/net/tcp for the APIs' ports, and reads the machine's TCP counters
// around the phase for the second.

// sockQueueEvery is how often the socket queues are sampled.
const sockQueueEvery = 100 * time.Millisecond

// sockSample is one look at the APIs' sockets.
type sockSample struct {
	// AcceptQueue: connections the kernel completed that no API has
	// accepted yet (the listening sockets' queue).
	AcceptQueue int
	// ServerUnread: API-side connections holding request bytes the API
	// has not read; ServerUnreadBytes their sum.
	ServerUnread, ServerUnreadBytes int
	// ClientUnread: client-side connections to an API holding answer
	// bytes the client has not read.
	ClientUnread int
	// Conns: established connections to the APIs, counted on the API side.
	Conns int
}

// tcpStates of /proc/net/tcp that the sampler reads.
const (
	tcpEstablished = 0x01
	tcpListen      = 0x0A
)

// readSockQueues reads /proc/net/tcp and tcp6 for connections whose local
// (API side) or remote (client side) port is one of ports.
func readSockQueues(ports map[int]bool) (sockSample, error) {
	var s sockSample
	read := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		read++
		parseSockQueues(b, ports, &s)
	}
	if read == 0 {
		return s, fmt.Errorf("bench: no /proc/net/tcp to read")
	}
	return s, nil
}

// parseSockQueues adds one /proc/net/tcp file's lines to s. A line is
// "sl local rem st tx_queue:rx_queue ...", addresses as hex "IP:PORT";
// a listening socket's rx_queue is its accept queue.
func parseSockQueues(b []byte, ports map[int]bool, s *sockSample) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	first := true
	for sc.Scan() {
		if first {
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		lport, lok := hexPort(f[1])
		rport, rok := hexPort(f[2])
		st, err1 := strconv.ParseUint(f[3], 16, 8)
		_, rx, ok := strings.Cut(f[4], ":")
		if !lok || !rok || err1 != nil || !ok {
			continue
		}
		rxq, err := strconv.ParseUint(rx, 16, 32)
		if err != nil {
			continue
		}
		switch {
		case st == tcpListen && ports[lport]:
			s.AcceptQueue += int(rxq)
		case st == tcpEstablished && ports[lport]:
			s.Conns++
			if rxq > 0 {
				s.ServerUnread++
				s.ServerUnreadBytes += int(rxq)
			}
		case st == tcpEstablished && ports[rport] && rxq > 0:
			s.ClientUnread++
		}
	}
}

func hexPort(addr string) (int, bool) {
	_, p, ok := strings.Cut(addr, ":")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(p, 16, 16)
	return int(n), err == nil
}

// apiPorts are the ports of the base URLs.
func apiPorts(bases []string) map[int]bool {
	out := map[int]bool{}
	for _, b := range bases {
		u, err := url.Parse(b)
		if err != nil {
			continue
		}
		if _, p, err := net.SplitHostPort(u.Host); err == nil {
			if n, err := strconv.Atoi(p); err == nil {
				out[n] = true
			}
		}
	}
	return out
}

// sockQueueFigure is one sampled figure over the phase.
type sockQueueFigure struct {
	Peak int     `json:"peak"`
	Mean float64 `json:"mean"`
	// SampleShare is the share of samples in which it was above zero.
	SampleShare float64 `json:"sampleShare"`
}

// sockQueueStats is the socket queues over the overload phase's
// timeline, and the machine's TCP counters over it.
type sockQueueStats struct {
	Method       string          `json:"method"`
	Samples      int             `json:"samples"`
	AcceptQueue  sockQueueFigure `json:"acceptQueue"`
	ServerUnread sockQueueFigure `json:"serverUnreadConns"`
	ClientUnread sockQueueFigure `json:"clientUnreadConns"`
	Conns        sockQueueFigure `json:"apiConns"`
	// TCP is the machine's TCP counters' increase over the phase
	// (TcpExt ListenOverflows, ListenDrops, TCPSynRetrans, TCPTimeouts;
	// Tcp ActiveOpens, RetransSegs), machine-wide.
	TCP map[string]int64 `json:"tcpCounters,omitempty"`
}

const sockQueueMethod = "every 100 ms over the timeline, /proc/net/tcp{,6} for the APIs' ports: the listening sockets' accept queue, " +
	"API-side connections with unread request bytes, client-side connections with unread answer bytes, established API connections; " +
	"tcpCounters are /proc/net/netstat and /proc/net/snmp increases over the timeline, machine-wide (a listen overflow drops a SYN the client resends a second later)"

// tcpCounterNames are the counters read around the phase, by section.
var tcpCounterNames = map[string][]string{
	"TcpExt": {"ListenOverflows", "ListenDrops", "TCPSynRetrans", "TCPTimeouts"},
	"Tcp":    {"ActiveOpens", "RetransSegs"},
}

// readTCPCounters reads tcpCounterNames from /proc/net/netstat and
// /proc/net/snmp; a counter it cannot read is left out.
func readTCPCounters() map[string]int64 {
	out := map[string]int64{}
	for _, f := range []string{"/proc/net/netstat", "/proc/net/snmp"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		parseTCPCounters(b, out)
	}
	return out
}

// parseTCPCounters reads "Section: names" / "Section: values" line pairs.
func parseTCPCounters(b []byte, out map[string]int64) {
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i++ {
		sec, names, ok := strings.Cut(lines[i], ":")
		sec2, vals, ok2 := strings.Cut(lines[i+1], ":")
		want := tcpCounterNames[sec]
		if !ok || !ok2 || sec != sec2 || want == nil {
			continue
		}
		nf, vf := strings.Fields(names), strings.Fields(vals)
		if len(nf) != len(vf) {
			continue
		}
		for k, n := range nf {
			for _, w := range want {
				if n == w {
					if v, err := strconv.ParseInt(vf[k], 10, 64); err == nil {
						out[sec+"."+n] = v
					}
				}
			}
		}
		i++
	}
}

// sockQueueSampler samples the APIs' socket queues until finish.
type sockQueueSampler struct {
	ports   map[int]bool
	before  map[string]int64
	mu      sync.Mutex
	samples []sockSample
	stop    chan struct{}
	done    chan struct{}
}

func startSockQueues(apis []string) *sockQueueSampler {
	s := &sockQueueSampler{ports: apiPorts(apis), before: readTCPCounters(), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(sockQueueEvery)
		defer t.Stop()
		for {
			if q, err := readSockQueues(s.ports); err == nil {
				s.mu.Lock()
				s.samples = append(s.samples, q)
				s.mu.Unlock()
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// finish stops sampling and sums up; nil when nothing could be sampled.
func (s *sockQueueSampler) finish() *sockQueueStats {
	close(s.stop)
	<-s.done
	after := readTCPCounters()
	s.mu.Lock()
	defer s.mu.Unlock()
	return summarizeSockQueues(s.samples, s.before, after)
}

func summarizeSockQueues(samples []sockSample, before, after map[string]int64) *sockQueueStats {
	if len(samples) == 0 {
		return nil
	}
	st := &sockQueueStats{Method: sockQueueMethod, Samples: len(samples)}
	fig := func(get func(sockSample) int) sockQueueFigure {
		var f sockQueueFigure
		sum, above := 0, 0
		for _, q := range samples {
			v := get(q)
			f.Peak = max(f.Peak, v)
			sum += v
			if v > 0 {
				above++
			}
		}
		f.Mean = float64(sum) / float64(len(samples))
		f.SampleShare = float64(above) / float64(len(samples))
		return f
	}
	st.AcceptQueue = fig(func(q sockSample) int { return q.AcceptQueue })
	st.ServerUnread = fig(func(q sockSample) int { return q.ServerUnread })
	st.ClientUnread = fig(func(q sockSample) int { return q.ClientUnread })
	st.Conns = fig(func(q sockSample) int { return q.Conns })
	for k, v := range after {
		if b, ok := before[k]; ok {
			if st.TCP == nil {
				st.TCP = map[string]int64{}
			}
			st.TCP[k] = v - b
		}
	}
	return st
}
