//go:build !k8s

package cluster

import (
	"fmt"

	pcluster "github.com/asynkron/protoactor-go/cluster"
)

// newK8sProvider refuses: this binary was built without the k8s tag.
func newK8sProvider(Config) (pcluster.ClusterProvider, error) {
	return nil, fmt.Errorf("%w: built without the k8s provider; rebuild with -tags k8s", ErrConfig)
}
