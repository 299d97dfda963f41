package clustertest

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// A member's cluster link has a fixed flow-control window: its gRPC
// server announces 1 MiB per stream and per connection (and so does its
// client, when it dials a peer: see the second half), and answers data
// it receives without a bandwidth-estimation PING of its own. With
// grpc-go's default (a dynamic window) that PING and its ACK go out about
// once per request, a write and a wakeup on both members each time.
//
// The probe speaks HTTP/2 itself: the client preface, a stream opened on
// protoactor's message stream with one data frame, then a PING of its
// own. The server handles frames in order, so a bandwidth PING would be
// queued before the ACK of the probe's PING.
func TestClusterLinkHasFixedWindow(t *testing.T) {
	h := newHarness(t)
	wf := h.startWorkflow("workflow-a")

	conn, err := net.DialTimeout("tcp", wf.Member.Address(), 3*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = io.WriteString(conn, http2.ClientPreface)
	require.NoError(t, err)
	fr := http2.NewFramer(conn, conn)
	require.NoError(t, fr.WriteSettings())

	requireFixedWindow(t, fr, "the server")

	var hdr bytes.Buffer
	enc := hpack.NewEncoder(&hdr)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/remote.Remoting/Receive"},
		{":authority", wf.Member.Address()}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		require.NoError(t, enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}))
	}
	require.NoError(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hdr.Bytes(), EndHeaders: true}))
	// One gRPC message: uncompressed, empty (a RemoteMessage with no field).
	require.NoError(t, fr.WriteData(1, false, []byte{0, 0, 0, 0, 0}))
	probe := [8]byte{'w', 'i', 'n', 'd', 'o', 'w', '?', '!'}
	require.NoError(t, fr.WritePing(false, probe))

	for {
		f, err := fr.ReadFrame()
		require.NoError(t, err, "waiting for the ACK of the probe's PING")
		p, ok := f.(*http2.PingFrame)
		if !ok {
			continue
		}
		require.True(t, p.IsAck(), "the server sent a PING of its own (%x): its window is not fixed", p.Data)
		if p.Data == probe {
			return
		}
	}
}

// When a member dials a peer, its gRPC client announces the same fixed
// window in its opening SETTINGS frame: the "peer" is a listener that
// reads the member's preface and frames.
func TestClusterLinkDialsWithFixedWindow(t *testing.T) {
	h := newHarness(t)
	wf := h.startWorkflow("workflow-a")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()

	// A message to an actor at the listener's address makes the member
	// dial it.
	wf.Member.System.Root.Send(actor.NewPID(ln.Addr().String(), "nobody"), &actor.Terminated{})
	require.NoError(t, ln.(*net.TCPListener).SetDeadline(time.Now().Add(10*time.Second)))
	conn, err := ln.Accept()
	require.NoError(t, err, "the member dials the peer")
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	preface := make([]byte, len(http2.ClientPreface))
	_, err = io.ReadFull(conn, preface)
	require.NoError(t, err)
	require.Equal(t, http2.ClientPreface, string(preface))
	fr := http2.NewFramer(conn, conn)
	requireFixedWindow(t, fr, "the dialling member")
}

// requireFixedWindow reads the peer's opening frames until its SETTINGS
// (acknowledged) and its connection WINDOW_UPDATE have come, and requires
// both windows to be 1 MiB: the stream window as announced, the
// connection window as the HTTP/2 default plus the peer's increment.
func requireFixedWindow(t *testing.T, fr *http2.Framer, peer string) {
	t.Helper()
	var streamWindow, connIncrement uint32
	for streamWindow == 0 || connIncrement == 0 {
		f, err := fr.ReadFrame()
		require.NoError(t, err, "reading the opening frames of %s", peer)
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			v, ok := f.Value(http2.SettingInitialWindowSize)
			require.True(t, ok, "%s announces its stream window", peer)
			streamWindow = v
			require.NoError(t, fr.WriteSettingsAck())
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				connIncrement = f.Increment
			}
		}
	}
	require.EqualValues(t, 1<<20, streamWindow, "stream window of %s", peer)
	require.EqualValues(t, 1<<20, 65535+connIncrement, "connection window of %s", peer)
}
