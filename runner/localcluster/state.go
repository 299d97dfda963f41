package localcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/shoppingmall-go/shoppingmall/runner/jsonfile"
)

// ErrNoState: no state file, so no cluster was started from this run dir
// (or it was stopped).
var ErrNoState = errors.New("cluster: no state file")

// ProcessState is one process of a running cluster, as a state file
// records it.
type ProcessState struct {
	Name string `json:"name"`
	Role Role   `json:"role,omitempty"`
	PID  int    `json:"pid"`
	// StartTime is the kernel's start time of PID (Linux), so a PID the
	// system later reuses is never mistaken for this process.
	StartTime uint64 `json:"startTime,omitempty"`
	// URL is an API's public base URL, or Redis' URL.
	URL string `json:"url,omitempty"`
	// OpsURL is a workflow's operations listener (/healthz, /readyz).
	OpsURL string `json:"opsUrl,omitempty"`
	// AdminURL is an API's admin listener (/admin/, /self-check/,
	// /debug/pprof/); it needs the token of State.AdminTokenFile.
	AdminURL string `json:"adminUrl,omitempty"`
	// MetricsURL is the node's Prometheus listener (GET /metrics).
	MetricsURL      string `json:"metricsUrl,omitempty"`
	Log             string `json:"log,omitempty"`
	AutomanagedPort int    `json:"automanagedPort,omitempty"`
}

// State is what clusterctl keeps in <run dir>/localcluster.json while a
// cluster runs.
type State struct {
	RunDir string `json:"runDir"`
	// AdminTokenFile holds the APIs' admin bearer token (mode 0600); the
	// token itself is never in the state file.
	AdminTokenFile string       `json:"adminTokenFile,omitempty"`
	Supervisor     ProcessState `json:"supervisor"`
	Redis          ProcessState `json:"redis"`
	// RedisMasters are the masters of a Redis Cluster (Config.RedisCluster),
	// each stopped by its PID; Redis is then the first of them, with the
	// cluster's URL.
	RedisMasters []ProcessState `json:"redisMasters,omitempty"`
	// RedisExtra are the other Redis processes, each stopped by its PID:
	// the Redis Cluster's replicas, or with RedisHA the data server that
	// is not the primary and the sentinels.
	RedisExtra []ProcessState `json:"redisExtra,omitempty"`
	// Archive is the PostgreSQL archive (Config.Archive), stopped by its
	// PID after the nodes.
	Archive ProcessState   `json:"archive,omitzero"`
	Nodes   []ProcessState `json:"nodes"`
}

// Processes lists every process of the state, nodes first, then the
// archive, then Redis, then the supervisor: the order a stop walks.
func (s State) Processes() []ProcessState {
	out := append([]ProcessState(nil), s.Nodes...)
	if s.Archive.PID != 0 {
		out = append(out, s.Archive)
	}
	// Sentinels and replicas before the primaries: a sentinel stopped
	// first fails nothing over.
	out = append(out, s.RedisExtra...)
	if len(s.RedisMasters) > 0 {
		out = append(out, s.RedisMasters...)
	} else if s.Redis.PID != 0 {
		out = append(out, s.Redis)
	}
	if s.Supervisor.PID != 0 {
		out = append(out, s.Supervisor)
	}
	return out
}

// Node returns the named node's entry.
func (s State) Node(name string) (ProcessState, bool) {
	for _, n := range s.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return ProcessState{}, false
}

// SelfProcess describes the calling process for a state file.
func SelfProcess(name string) ProcessState {
	pid := os.Getpid()
	st, _ := processStartTime(pid)
	return ProcessState{Name: name, PID: pid, StartTime: st}
}

// WriteState writes the state file atomically (a reader sees the old file
// or the whole new one).
func WriteState(path string, s State) error {
	if err := jsonfile.Write(path, s); err != nil {
		return fmt.Errorf("cluster: state: %w", err)
	}
	return nil
}

// ReadState reads a state file; a missing file is ErrNoState.
func ReadState(path string) (State, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return State{}, fmt.Errorf("%w: %s", ErrNoState, path)
	}
	if err != nil {
		return State{}, fmt.Errorf("cluster: read state: %w", err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return State{}, fmt.Errorf("cluster: state %s: %w", path, err)
	}
	return s, nil
}
