//go:build k8s

package cluster

import (
	"fmt"
	"os"
	"strings"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/shoppingmall-go/shoppingmall/cluster/k8smembers"
)

// serviceAccountNamespace is where Kubernetes mounts the namespace of the
// pod's service account, which is the pod's own.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// newK8sProvider builds our Kubernetes membership provider (k8smembers)
// from the pod's in-cluster configuration: the pod is the one named by the
// hostname (Kubernetes sets it to the pod's name) in its service
// account's namespace.
func newK8sProvider(cfg Config) (pcluster.ClusterProvider, error) {
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("%w: k8s provider: %v", ErrConfig, err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("%w: k8s provider: %v", ErrConfig, err)
	}
	ns, err := os.ReadFile(serviceAccountNamespace)
	if err != nil {
		return nil, fmt.Errorf("%w: k8s provider: pod namespace: %v", ErrConfig, err)
	}
	pod, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("%w: k8s provider: pod name: %v", ErrConfig, err)
	}
	p, err := k8smembers.New(k8smembers.Config{
		Client:      client,
		Namespace:   strings.TrimSpace(string(ns)),
		PodName:     pod,
		ClusterName: Name,
		Logger:      cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: k8s provider: %v", ErrConfig, err)
	}
	return p, nil
}
