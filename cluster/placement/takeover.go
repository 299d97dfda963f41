package placement

import (
	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
)

// DropRoute tells every member, this one included, to forget a route to
// the grain a record named before a takeover, as a stopped grain's
// activator does: a cached pid of a live old owner (a forced takeover)
// would otherwise keep receiving the order's commands. The old grain
// learns nothing from it; the raised fence is what stops it writing.
func (l *Lookup) DropRoute(kind, id string, old location.Record) {
	if l.cluster == nil || old.PIDID == "" {
		return
	}
	pid := actor.NewPID(old.PIDAddress, old.PIDID)
	l.cluster.PidCache.RemoveByValue(id, kind, pid)
	l.cluster.MemberList.BroadcastEvent(&pcluster.ActivationTerminated{
		Pid: pid, ClusterIdentity: pcluster.NewClusterIdentity(id, kind),
	}, true)
}
