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
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("cluster: admin token: %w", err)
	}
	tok := hex.EncodeToString(b)
	path := AdminTokenPath(runDir)
	tmp, err := os.CreateTemp(runDir, ".admin-token-*")
	if err != nil {
		return "", fmt.Errorf("cluster: admin token: %w", err)
	}
	defer os.Remove(tmp.Name())
	// CreateTemp makes the file 0600; Chmod says so whatever the umask.
	err = errors.Join(tmp.Chmod(0o600), func() error { _, err := tmp.WriteString(tok + "\n"); return err }(), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return "", fmt.Errorf("cluster: admin token: %w", err)
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
// metrics address, and the admin token (an API's admin listener, a
// workflow's /debug/pprof/).
func (c *Cluster) env(n *node) []string {
	env := c.cfg.Env
	if env == nil {
		env = os.Environ()
	}
	return append(append([]string{}, env...),
		MetricsHTTPEnv+"=127.0.0.1:"+strconv.Itoa(n.metricsPort), AdminTokenEnv+"="+c.adminToken)
}
