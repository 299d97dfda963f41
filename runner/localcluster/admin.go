package localcluster

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// AdminTokenFile is the name, under the run directory, of the file that
// holds the cluster's admin bearer token.
const AdminTokenFile = "admin.token"

// AdminTokenEnv is the variable through which a process gets the admin
// token: a command line is visible to every user of the host, a
// process's environment only to its owner.
const AdminTokenEnv = "SHOPPINGMALL_ADMIN_TOKEN"

// AdminTokenPath is the admin token file of a run directory.
func AdminTokenPath(runDir string) string { return filepath.Join(runDir, AdminTokenFile) }

// writeAdminToken makes a fresh random token and writes it, mode 0600, to
// the run directory: a new cluster never accepts an earlier one's token.
func writeAdminToken(runDir string) (string, error) {
	tok, err := writeSecret(AdminTokenPath(runDir))
	if err != nil {
		return "", fmt.Errorf("cluster: admin token: %w", err)
	}
	return tok, nil
}

// OrderIDSecretFile is the name, under the run directory, of the file that
// holds the secret every API derives OrderIds under (commerce-api's
// -order-id-secret).
const OrderIDSecretFile = "order-id.secret"

// OrderIDSecretEnv is the variable through which an API gets the OrderId
// secret, for the admin token's reason.
const OrderIDSecretEnv = "SHOPPINGMALL_ORDER_ID_SECRET"

// OrderIDSecret is the secret this cluster's APIs derive OrderIds under
// (OrderIDSecretFile), for a test that looks a key's mapping or order up
// in Redis itself (order.OrderIDFor).
func (c *Cluster) OrderIDSecret() []byte { return []byte(c.orderIDSecret) }

// orderIDSecret returns the run directory's OrderId secret, made the first
// time. Unlike the admin token it is kept across restarts: the secret is
// never rotated, since a retried key would name a second order under a new
// one whenever its mapping is gone.
func orderIDSecret(runDir string) (string, error) {
	path := filepath.Join(runDir, OrderIDSecretFile)
	b, err := os.ReadFile(path)
	if s := strings.TrimSpace(string(b)); err == nil && s != "" {
		return s, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("cluster: order id secret: %w", err)
	}
	s, err := writeSecret(path)
	if err != nil {
		return "", fmt.Errorf("cluster: order id secret: %w", err)
	}
	return s, nil
}

// writeSecret writes 32 random bytes in hex to path, mode 0600, atomically.
func writeSecret(path string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(b)
	tmp, err := os.CreateTemp(filepath.Dir(path), ".secret-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	// CreateTemp makes the file 0600; Chmod says so whatever the umask.
	err = errors.Join(tmp.Chmod(0o600), func() error { _, err := tmp.WriteString(tok + "\n"); return err }(), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return "", err
	}
	return tok, nil
}

// ReadAdminToken reads the admin token a cluster started from runDir
// wrote.
func ReadAdminToken(runDir string) (string, error) {
	b, err := os.ReadFile(AdminTokenPath(runDir))
	if err != nil {
		return "", fmt.Errorf("cluster: admin token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("cluster: admin token: %s is empty", AdminTokenPath(runDir))
	}
	return tok, nil
}

// AdminToken is the admin bearer token of this cluster's APIs.
func (c *Cluster) AdminToken() string { return c.adminToken }

// AdminURL is the base URL of an API node's admin listener, e.g.
// http://127.0.0.1:40125; requests there need AdminToken.
func (c *Cluster) AdminURL(name string) string {
	n, ok := c.nodes[name]
	if !ok || n.role != RoleAPI {
		return ""
	}
	return "http://127.0.0.1:" + strconv.Itoa(n.adminPort)
}

// MetricsHTTPEnv is the variable through which a node gets its
// -metrics-http address. A binary built before that flag ignores the
// variable, where the flag would stop it, so a runner can still start
// (and bench) an older commit.
const MetricsHTTPEnv = "SHOPPINGMALL_METRICS_HTTP"

// env is a node's environment: Config.Env (nil: the caller's), its
// metrics address, the admin token (an API's admin listener, a workflow's
// /debug/pprof/) and the OrderId secret (an API's).
func (c *Cluster) env(n *node) []string {
	env := c.cfg.Env
	if env == nil {
		env = os.Environ()
	}
	return append(append([]string{}, env...),
		MetricsHTTPEnv+"=127.0.0.1:"+strconv.Itoa(n.metricsPort), AdminTokenEnv+"="+c.adminToken,
		OrderIDSecretEnv+"="+c.orderIDSecret)
}
