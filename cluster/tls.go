package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// TLS is the cluster link's mutual TLS, as PEM files. With it every member
// serves its remote (gRPC) endpoint and dials its peers with CertFile, and
// accepts a connection only from a peer whose certificate chains to CAFile:
// a process without such a certificate cannot send any message to a member,
// operator messages (CloseOrderReq, RelocateOrderReq) included. The zero
// value leaves the link in plain text.
//
// The certificate is both a server and a client certificate (extended key
// usages serverAuth and clientAuth), and its subject alternative names
// must cover the host other members dial: an IP SAN for an IP address
// (-advertised-host, else -bind), a DNS SAN for a name.
type TLS struct {
	CertFile string
	KeyFile  string
	CAFile   string
}

// Enabled reports whether any file is set; then all three must be.
func (t TLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" || t.CAFile != "" }

// transport loads the files and returns the remote's server and dial
// credentials. dialHost is the host other members dial, which the
// certificate must cover; empty skips that check (a wildcard bind without
// an advertised host).
func (t TLS) transport(dialHost string) (grpc.ServerOption, grpc.DialOption, error) {
	if t.CertFile == "" || t.KeyFile == "" || t.CAFile == "" {
		return nil, nil, fmt.Errorf("%w: cluster TLS needs a certificate, its key and the CA (all three)", ErrConfig)
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: cluster TLS certificate: %v", ErrConfig, err)
	}
	caPEM, err := os.ReadFile(t.CAFile)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: cluster TLS CA: %v", ErrConfig, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, nil, fmt.Errorf("%w: cluster TLS CA %s holds no PEM certificate", ErrConfig, t.CAFile)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, nil, fmt.Errorf("%w: cluster TLS certificate: %v", ErrConfig, err)
	}
	// A certificate the peers would refuse fails here, at start, rather
	// than as a member nobody can reach.
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, nil, fmt.Errorf("%w: cluster TLS certificate does not chain to the CA for server and client use: %v", ErrConfig, err)
	}
	if dialHost != "" {
		if err := leaf.VerifyHostname(dialHost); err != nil {
			return nil, nil, fmt.Errorf("%w: cluster TLS certificate does not cover the advertised host %s (add it as a SAN): %v", ErrConfig, dialHost, err)
		}
	}
	server := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}
	client := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
	}
	return grpc.Creds(credentials.NewTLS(server)), grpc.WithTransportCredentials(credentials.NewTLS(client)), nil
}

// dialHost is the host part of the address other members dial: the
// advertised address if set, else the bind host; empty for a wildcard
// bind, whose dialled address is not known here.
func dialHost(cfg Config) string {
	h := cfg.Host
	if cfg.AdvertisedHost != "" {
		h = cfg.AdvertisedHost
		if host, _, err := net.SplitHostPort(h); err == nil {
			h = host
		}
	}
	if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
		return ""
	}
	return h
}
