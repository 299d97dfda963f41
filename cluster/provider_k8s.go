//go:build k8s

package cluster

import (
	"fmt"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/k8s"
)

// newK8sProvider uses the pod's in-cluster configuration; membership comes
// from the pods' labels, as protoactor's k8s provider manages them.
func newK8sProvider(Config) (pcluster.ClusterProvider, error) {
	p, err := k8s.New()
	if err != nil {
		return nil, fmt.Errorf("%w: k8s provider: %v", ErrConfig, err)
	}
	return p, nil
}
