//go:build k8s

package k8smembers

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

const testKind = "shoppingmall.k8s-test"

type realMember struct {
	c      *pcluster.Cluster
	lookup *placement.Lookup
	id     string
	port   int
}

// startReal starts a protoactor member on 127.0.0.1 with this package's
// provider on the fake API, the project's placement Lookup on a real
// Location Store, and waits for the Lookup's WaitReady: the member sees
// itself, under its actor system's id, in the topology the provider
// publishes.
func startReal(t *testing.T, api *fakeAPI, store location.Store, podName string, kinds ...string) *realMember {
	t.Helper()
	p, err := New(Config{Client: api, Namespace: ns, PodName: podName,
		Logger: testLogger(t, slog.LevelInfo), MinBackoff: 20 * time.Millisecond})
	require.NoError(t, err)
	framework := testLogger(t, slog.LevelError+4)
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return framework }))
	lookup := placement.New(placement.Config{Store: store, NodeName: podName, Logger: testLogger(t, slog.LevelWarn)})
	var ks []*pcluster.Kind
	for _, k := range kinds {
		ks = append(ks, pcluster.NewKind(k, actor.PropsFromFunc(func(actor.Context) {})))
	}
	c := pcluster.New(system, pcluster.Configure(clusterName, p, lookup, remote.Configure("127.0.0.1", 0),
		pcluster.WithKinds(ks...), pcluster.WithClusterContextProducer(placement.ContextProducer(lookup))))
	c.StartMember()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, lookup.WaitReady(ctx), "%s never saw itself", podName)
	_, port, err := system.GetHostPort()
	require.NoError(t, err)
	return &realMember{c: c, lookup: lookup, id: system.ID, port: port}
}

func (m *realMember) seesOnly(ids ...string) bool {
	if m.c.MemberList.Length() != len(ids) {
		return false
	}
	for _, id := range ids {
		if !m.lookup.Live(id) {
			return false
		}
	}
	return true
}

// TestRealMembersJoinUnderTheirActorSystemIDs forms a protoactor cluster
// of three in-process members (two hosting a kind, one not; one pod never
// Ready) on the fake API: each reaches WaitReady through the placement
// Lookup and sees the others by their actor system ids, and pods that
// are terminating or deleted leave every member's topology.
func TestRealMembersJoinUnderTheirActorSystemIDs(t *testing.T) {
	api := newFakeAPI(pod("wf-a", "127.0.0.1", true), pod("wf-b", "127.0.0.1", false), pod("api-a", "127.0.0.1", false))
	srv := redistest.Start(t)
	rdb := srv.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := location.NewRedis(location.Config{Client: rdb})
	require.NoError(t, err)

	// Each member's watch is open before the next one labels its pod.
	a := startReal(t, api, store, "wf-a", testKind)
	api.waitWatches(t, 1)
	b := startReal(t, api, store, "wf-b", testKind)
	api.waitWatches(t, 2)
	c := startReal(t, api, store, "api-a")
	api.waitWatches(t, 3)
	members := []*realMember{a, b, c}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, m := range members {
			wg.Add(1)
			go func() { defer wg.Done(); m.c.Shutdown(true) }()
		}
		wg.Wait()
	})

	for _, m := range members {
		require.Eventually(t, func() bool { return m.seesOnly(a.id, b.id, c.id) }, waitFor, tick,
			"member %s sees all three", m.id)
	}
	for name, m := range map[string]*realMember{"wf-a": a, "wf-b": b, "api-a": c} {
		l := api.pod(t, name).Labels
		require.Equal(t, m.id, l["cluster.shoppingmall/member-id"], "%s labelled with its ActorSystem.ID", name)
		require.Equal(t, clusterName, l["cluster.shoppingmall/cluster"])
		require.Equal(t, strconv.Itoa(m.port), l["cluster.shoppingmall/port"])
		require.Equal(t, "order-workflow", l["app.kubernetes.io/name"], "other labels stay")
	}
	require.Equal(t, "true", api.pod(t, "wf-b").Labels["cluster.shoppingmall/kind-"+testKind])
	require.NotContains(t, api.pod(t, "api-a").Labels, "cluster.shoppingmall/kind-"+testKind)
	wantKind := []string{a.id, b.id}
	slices.Sort(wantKind)
	require.Equal(t, wantKind, ids(c.lookup.Eligible(testKind)), "the api member places the kind on both wf members")

	// api-a's pod is terminating: it leaves a's and b's topology.
	p := api.pod(t, "api-a")
	now := metav1.Now()
	p.DeletionTimestamp = &now
	api.update(t, p)
	for _, m := range []*realMember{a, b} {
		require.Eventually(t, func() bool { return m.seesOnly(a.id, b.id) }, waitFor, tick, "%s drops the terminating pod", m.id)
	}
	// wf-b's pod is deleted: a is alone.
	require.NoError(t, api.CoreV1().Pods(ns).Delete(context.Background(), "wf-b", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { return a.seesOnly(a.id) }, waitFor, tick, "a drops the deleted pod")
}

func ids(ms []*pcluster.Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Id
	}
	return out
}
