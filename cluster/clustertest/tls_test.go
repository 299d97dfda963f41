package clustertest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/remote"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/cluster"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serial int64

func nextSerial() *big.Int { serial++; return big.NewInt(serial + time.Now().UnixNano()) }

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue makes a member certificate (server and client use) with an IP SAN
// for each ip, and returns its PEM and its key's PEM.
func (ca *testCA) issue(t *testing.T, name string, ips ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// files writes a member's certificate, key and the CA to a directory of
// their own, as an operator would hand them to -cluster-tls-*.
func (ca *testCA) files(t *testing.T, name string, ips ...string) cluster.TLS {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	c, k := ca.issue(t, name, ips...)
	f := cluster.TLS{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem"), CAFile: filepath.Join(dir, "ca.pem")}
	require.NoError(t, os.WriteFile(f.CertFile, c, 0o600))
	require.NoError(t, os.WriteFile(f.KeyFile, k, 0o600))
	require.NoError(t, os.WriteFile(f.CAFile, ca.pem, 0o600))
	return f
}

// dialRemote opens protoactor's message stream (Remoting.Receive) on addr
// the way a peer's endpoint writer does, sends the connect request and
// reads the member's answer; nil means the member served the peer.
func dialRemote(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	// passthrough: the address as given, as grpc.Dial resolved it.
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	stream, err := remote.NewRemotingClient(conn).Receive(ctx)
	if err != nil {
		return err
	}
	err = stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{
		ConnectRequest: &remote.ConnectRequest{ConnectionType: &remote.ConnectRequest_ServerConnection{
			ServerConnection: &remote.ServerConnection{SystemId: "peer-under-test", Address: "127.0.0.1:1"},
		}},
	}})
	if err != nil {
		return err
	}
	reply, err := stream.Recv()
	if err != nil {
		return err
	}
	if reply.GetConnectResponse() == nil {
		return fmt.Errorf("no connect response: %v", reply)
	}
	return nil
}

func clientTLS(t *testing.T, trust *testCA, cert []byte, key []byte) credentials.TransportCredentials {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(trust.cert)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		pair, err := tls.X509KeyPair(cert, key)
		require.NoError(t, err)
		cfg.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(cfg)
}

// With the cluster link on mutual TLS, a member holding a certificate from
// the CA is served end to end (an order starts and completes through
// it), while a peer without a certificate, with one from another CA, or
// in plain text cannot even open the remote stream every message travels
// on: it can send nothing, operator messages included.
func TestClusterLinkMutualTLS(t *testing.T) {
	h := newHarness(t)
	ca, other := newCA(t, "shoppingmall-test-ca"), newCA(t, "another-ca")
	wf := h.startWorkflow("workflow-a", func(c *node.WorkflowConfig) { c.Cluster.TLS = ca.files(t, "workflow-a", "127.0.0.1") })

	// A member with a certificate from the CA: served.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := cluster.Start(ctx, cluster.Config{
		NodeName: "api-a", Provider: cluster.ProviderTest, TestAgent: h.agent, TLS: ca.files(t, "api-a", "127.0.0.1"),
		RefreshTTL: 100 * time.Millisecond, Location: h.stores.Location, Logger: h.logger("api-a"),
		FrameworkLogLevel: quietFramework,
	})
	require.NoError(t, err)
	t.Cleanup(m.Crash)
	waitMembers(t, m.Lookup, 1)
	req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
	res, recorded, err := grain.NewClient(m.Lookup).StartOrderWorkflow(ctxT(t, 10*time.Second), req)
	require.NoError(t, err)
	require.True(t, recorded)
	require.Equal(t, contracts.OrderStatus_Created, res.GetState().GetStatus())
	h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)

	addr := wf.Member.Address()
	goodCert, goodKey := ca.issue(t, "operator-tool", "127.0.0.1")
	require.NoError(t, dialRemote(t, addr, clientTLS(t, ca, goodCert, goodKey)), "a peer with a certificate from the CA is served")

	err = dialRemote(t, addr, clientTLS(t, ca, nil, nil))
	require.Error(t, err, "a peer without a certificate is refused")
	t.Logf("no certificate: %v", err)

	otherCert, otherKey := other.issue(t, "intruder", "127.0.0.1")
	err = dialRemote(t, addr, clientTLS(t, ca, otherCert, otherKey))
	require.Error(t, err, "a peer with a certificate from another CA is refused")
	t.Logf("another CA: %v", err)

	err = dialRemote(t, addr, insecure.NewCredentials())
	require.Error(t, err, "a plain-text peer is refused")
	t.Logf("plain text: %v", err)
}

// A certificate that does not cover the advertised host, or a TLS
// configuration missing a file, fails the start instead of leaving a
// member no peer can reach.
func TestClusterTLSRefusesABadConfigurationAtStart(t *testing.T) {
	h := newHarness(t)
	ca := newCA(t, "shoppingmall-test-ca")
	start := func(tc cluster.TLS) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m, err := cluster.Start(ctx, cluster.Config{
			NodeName: "api-x", Provider: cluster.ProviderTest, TestAgent: h.agent, TLS: tc,
			Location: h.stores.Location, Logger: h.logger("api-x"), FrameworkLogLevel: quietFramework,
		})
		if err == nil {
			m.Crash()
		}
		return err
	}
	err := start(ca.files(t, "wrong-host", "10.9.8.7"))
	require.ErrorIs(t, err, cluster.ErrConfig)
	require.ErrorContains(t, err, "127.0.0.1")
	half := ca.files(t, "half", "127.0.0.1")
	half.CAFile = ""
	require.ErrorIs(t, start(half), cluster.ErrConfig)
}

// The automanaged membership endpoint listens on the member's bind host
// only, not on every interface: bound to 127.0.0.2, it answers there and
// refuses 127.0.0.1 on the same port.
func TestAutomanagedHealthListensOnTheBindHost(t *testing.T) {
	h := newHarness(t)
	// A reserved port outside the ephemeral range: a port the kernel
	// handed out on 127.0.0.2 may be another test's listener or outgoing
	// connection on 127.0.0.1, which the last check would take for this
	// member's.
	ports, err := redisserver.FreePorts(1)
	require.NoError(t, err)
	port := ports[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := cluster.Start(ctx, cluster.Config{
		NodeName: "api-bind", Provider: cluster.ProviderAutomanaged, Host: "127.0.0.2",
		AutomanagedPort: port, Seeds: []string{"127.0.0.2:" + strconv.Itoa(port)},
		RefreshTTL: 100 * time.Millisecond, Location: h.stores.Location, Logger: h.logger("api-bind"),
		FrameworkLogLevel: quietFramework,
	})
	require.NoError(t, err)
	t.Cleanup(m.Stop)

	hc := &http.Client{Timeout: 2 * time.Second}
	res, err := hc.Get("http://127.0.0.2:" + strconv.Itoa(port) + "/_health")
	require.NoError(t, err)
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, string(b))
	var nodeModel struct {
		ID          string `json:"id"`
		ClusterName string `json:"cluster_name"`
	}
	require.NoError(t, json.Unmarshal(b, &nodeModel))
	require.Equal(t, m.ID(), nodeModel.ID, "the endpoint answers as the provider's own /_health")
	require.Equal(t, cluster.Name, nodeModel.ClusterName)

	_, err = net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 2*time.Second)
	require.Error(t, err, "nothing listens on another interface")
}
