package main

import (
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseSockQueues(t *testing.T) {
	// Port 8080 = 0x1F90 is the API's; 0xC350 = 50000 a client's.
	text := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00001000:00000003 00:00000000 00000000     0        0 1 1 ffff 100 0 0 10 0
   1: 0100007F:1F90 0100007F:C350 01 00000000:000000C8 00:00000000 00000000     0        0 2 1 ffff 20 4 30 10 -1
   2: 0100007F:C350 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 3 1 ffff 20 4 30 10 -1
   3: 0100007F:C351 0100007F:1F90 01 00000000:00000040 00:00000000 00000000     0        0 4 1 ffff 20 4 30 10 -1
   4: 0100007F:1F91 0100007F:C352 01 00000000:00000010 00:00000000 00000000     0        0 5 1 ffff 20 4 30 10 -1
   5: 0100007F:1F90 0100007F:C353 01 00000000:00000000 00:00000000 00000000     0        0 6 1 ffff 20 4 30 10 -1
garbage
`
	var s sockSample
	parseSockQueues([]byte(text), map[int]bool{8080: true}, &s)
	require.Equal(t, sockSample{AcceptQueue: 3, ServerUnread: 1, ServerUnreadBytes: 200, ClientUnread: 1, Conns: 2}, s)
}

func TestParseTCPCounters(t *testing.T) {
	text := "TcpExt: SyncookiesSent ListenOverflows ListenDrops TCPTimeouts TCPSynRetrans\n" +
		"TcpExt: 1 2 3 4 5\n" +
		"IpExt: InNoRoutes\n" +
		"IpExt: 9\n" +
		"Tcp: RtoAlgorithm ActiveOpens RetransSegs\n" +
		"Tcp: 1 70 80\n"
	out := map[string]int64{}
	parseTCPCounters([]byte(text), out)
	require.Equal(t, map[string]int64{"TcpExt.ListenOverflows": 2, "TcpExt.ListenDrops": 3, "TcpExt.TCPTimeouts": 4,
		"TcpExt.TCPSynRetrans": 5, "Tcp.ActiveOpens": 70, "Tcp.RetransSegs": 80}, out)
}

func TestSummarizeSockQueues(t *testing.T) {
	require.Nil(t, summarizeSockQueues(nil, nil, nil))
	st := summarizeSockQueues([]sockSample{{AcceptQueue: 4, Conns: 10}, {ServerUnread: 2, Conns: 12}, {}, {ClientUnread: 1, Conns: 2}},
		map[string]int64{"Tcp.ActiveOpens": 10, "TcpExt.ListenOverflows": 1}, map[string]int64{"Tcp.ActiveOpens": 25, "TcpExt.ListenOverflows": 1, "Tcp.New": 3})
	require.Equal(t, 4, st.Samples)
	require.Equal(t, sockQueueFigure{Peak: 4, Mean: 1, SampleShare: 0.25}, st.AcceptQueue)
	require.Equal(t, sockQueueFigure{Peak: 2, Mean: 0.5, SampleShare: 0.25}, st.ServerUnread)
	require.Equal(t, sockQueueFigure{Peak: 12, Mean: 6, SampleShare: 0.75}, st.Conns)
	require.Equal(t, map[string]int64{"Tcp.ActiveOpens": 15, "TcpExt.ListenOverflows": 0}, st.TCP, "only counters read both times")
}

// Real sockets on loopback: a connection nobody accepted is in the accept
// queue, a request nobody read is unread on the server side, and an
// answer nobody read is unread on the client side.
func TestReadSockQueuesSeesRealSockets(t *testing.T) {
	// The sampler goes by port number, on every address, IPv6 too: a port
	// whose number another process's socket also has (a listener on
	// another address, with a backlog of its own) would be counted with
	// ours, so take one nothing else shows.
	var ln net.Listener
	var ports map[int]bool
	for attempt := 0; ; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ports = map[int]bool{l.Addr().(*net.TCPAddr).Port: true}
		s, err := readSockQueues(ports)
		require.NoError(t, err)
		if s == (sockSample{}) {
			ln = l
			break
		}
		_ = l.Close()
		require.Less(t, attempt, 20, "every port tried is shared with another socket: %+v", s)
	}
	t.Cleanup(func() { _ = ln.Close() })

	waitFor := func(what string, ok func(sockSample) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			s, err := readSockQueues(ports)
			require.NoError(t, err)
			if ok(s) {
				return
			}
			require.True(t, time.Now().Before(deadline), "%s: last sample %+v", what, s)
			time.Sleep(10 * time.Millisecond)
		}
	}

	c1, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c1.Close() })
	waitFor("one connection not accepted", func(s sockSample) bool { return s.AcceptQueue == 1 })

	_, err = fmt.Fprint(c1, "POST /orders HTTP/1.1\r\n\r\n")
	require.NoError(t, err)
	srv, err := ln.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	waitFor("the request unread", func(s sockSample) bool {
		return s.AcceptQueue == 0 && s.ServerUnread == 1 && s.ServerUnreadBytes == 25 && s.Conns == 1
	})

	buf := make([]byte, 25)
	_, err = io.ReadFull(srv, buf)
	require.NoError(t, err)
	_, err = fmt.Fprint(srv, "HTTP/1.1 503 Service Unavailable\r\n\r\n")
	require.NoError(t, err)
	waitFor("the answer unread", func(s sockSample) bool { return s.ServerUnread == 0 && s.ClientUnread == 1 })
}
