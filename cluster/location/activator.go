package location

import (
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
)

type hosted struct {
	pid        *actor.PID
	generation int64
}

// activator hosts grains on one member. It is the only place that spawns
// them, so two activations of one identity on one member cannot happen.
type activator struct {
	lookup *Lookup
	grains map[string]*hosted // kind/identity → grain
}

func (a *activator) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *Activate:
		ctx.Respond(a.activate(ctx, m))
	case *actor.Terminated:
		for key, h := range a.grains {
			if h.pid.Equal(m.Who) {
				delete(a.grains, key)
				kind, id := splitKey(key)
				if k, ok := a.lookup.cluster.TryGetClusterKind(kind); ok {
					k.Dec()
				}
				// Only the local pid cache learns of a stop by itself; tell
				// the other members so none keeps calling a stopped grain.
				a.lookup.cluster.MemberList.BroadcastEvent(&pcluster.ActivationTerminated{
					Pid: h.pid, ClusterIdentity: pcluster.NewClusterIdentity(id, kind),
				}, true)
			}
		}
	case *hostedQuery:
		out := make([]HostedGrain, 0, len(a.grains))
		for key, h := range a.grains {
			kind, id := splitKey(key)
			out = append(out, HostedGrain{Kind: kind, Identity: id, PID: h.pid, Generation: h.generation})
		}
		ctx.Respond(out)
	}
}

func (a *activator) activate(ctx actor.Context, m *Activate) *Activated {
	key := m.Kind + "/" + m.Identity
	if h, ok := a.grains[key]; ok {
		if h.generation == m.Generation {
			return &Activated{PidAddress: h.pid.Address, PidId: h.pid.Id}
		}
		return &Activated{Error: "identity already hosted here with another generation"}
	}
	if a.lookup.draining.Load() {
		return &Activated{Error: "member is draining"}
	}
	kind, ok := a.lookup.cluster.TryGetClusterKind(m.Kind)
	if !ok || !a.lookup.kinds[m.Kind] {
		return &Activated{Error: "kind not hosted here: " + m.Kind}
	}
	act := Activation{Kind: m.Kind, Identity: m.Identity, Generation: m.Generation, Reason: m.Reason, Lookup: a.lookup}
	// Props must come from the Kind and carry the cluster identity, or the
	// grain never sees ClusterInit.
	props := pcluster.WithClusterIdentity(kind.Props, pcluster.NewClusterIdentity(m.Identity, m.Kind)).
		Clone(actor.WithOnInit(func(c actor.Context) {
			if g, ok := c.Actor().(Activatable); ok {
				g.SetActivation(act)
			}
		}))
	pid := ctx.SpawnPrefix(props, m.Identity)
	ctx.Watch(pid)
	kind.Inc()
	a.grains[key] = &hosted{pid: pid, generation: m.Generation}
	a.lookup.log.Debug("activated", slog.String("identity", key), slog.Int64("generation", m.Generation), slog.String("reason", m.Reason.String()))
	return &Activated{PidAddress: pid.Address, PidId: pid.Id}
}

func splitKey(key string) (string, string) {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return key[:i], key[i+1:]
		}
	}
	return key, ""
}

type hostedQuery struct{}

// HostedGrain is one grain hosted by this member's activator.
type HostedGrain struct {
	Kind       string
	Identity   string
	PID        *actor.PID
	Generation int64
}

// Hosted lists the grains this member hosts.
func (l *Lookup) Hosted() ([]HostedGrain, error) {
	if l.activator == nil {
		return nil, nil
	}
	res, err := l.cluster.ActorSystem.Root.RequestFuture(l.activator, &hostedQuery{}, l.cfg.ActivationTimeout).Result()
	if err != nil {
		return nil, err
	}
	out, _ := res.([]HostedGrain)
	return out, nil
}
