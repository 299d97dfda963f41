//go:build k8s

package k8smembers

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const (
	ns          = "shoppingmall"
	clusterName = "shoppingmall.workflow"
	waitFor     = 10 * time.Second
	tick        = 10 * time.Millisecond
)

type tlogWriter struct{ t *testing.T }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testLogger(t *testing.T, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: level}))
}

// pod is a pod as the kubelet reports it: Running with an IP, its
// container running but, unless ready, not Ready.
func pod(name, ip string, ready bool) *v1.Pod {
	cond := v1.ConditionFalse
	if ready {
		cond = v1.ConditionTrue
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name),
			Labels: map[string]string{"app.kubernetes.io/name": "order-workflow"}},
		Status: v1.PodStatus{
			Phase: v1.PodRunning, PodIP: ip, PodIPs: []v1.PodIP{{IP: ip}},
			Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: cond}, {Type: v1.ContainersReady, Status: cond}},
			ContainerStatuses: []v1.ContainerStatus{{Name: "order-workflow", Ready: ready,
				State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}},
		},
	}
}

// fakeAPI is the fake clientset with the number of watches opened, so
// that a test changes pods only once the watch that must see it is open
// (the fake, unlike the API server, does not resume a watch from the
// list's resource version).
type fakeAPI struct {
	*fake.Clientset
	watches atomic.Int32
}

func newFakeAPI(pods ...*v1.Pod) *fakeAPI {
	objs := make([]runtime.Object, len(pods))
	for i, p := range pods {
		objs[i] = p
	}
	f := &fakeAPI{Clientset: fake.NewSimpleClientset(objs...)}
	f.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := f.Tracker().Watch(a.GetResource(), a.GetNamespace())
		if err == nil {
			f.watches.Add(1)
		}
		return true, w, err
	})
	return f
}

func (f *fakeAPI) waitWatches(t *testing.T, n int32) {
	t.Helper()
	require.Eventually(t, func() bool { return f.watches.Load() >= n }, waitFor, tick, "watches open")
}

func (f *fakeAPI) pod(t *testing.T, name string) *v1.Pod {
	t.Helper()
	p, err := f.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return p
}

func (f *fakeAPI) update(t *testing.T, p *v1.Pod) {
	t.Helper()
	_, err := f.CoreV1().Pods(ns).Update(context.Background(), p, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// sink stands in for protoactor's member list: it keeps the last
// topology the provider published.
type sink struct {
	mu   sync.Mutex
	last pcluster.Members
	n    int
}

func (s *sink) publish(m pcluster.Members) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last, s.n = m, s.n+1
}

func (s *sink) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, m := range s.last {
		out = append(out, m.Id)
	}
	return out
}

func (s *sink) member(id string) *pcluster.Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.last {
		if m.Id == id {
			return m
		}
	}
	return nil
}

func (s *sink) waitIDs(t *testing.T, want ...string) {
	t.Helper()
	slices.Sort(want)
	require.Eventually(t, func() bool { return slices.Equal(s.ids(), want) }, waitFor, tick,
		"want members %v", want)
}

type sinkMember struct {
	p    *Provider
	sink *sink
}

// startSink starts a provider for podName whose topology goes to a sink.
func startSink(t *testing.T, api *fakeAPI, podName, id string, port int, kinds ...string) *sinkMember {
	t.Helper()
	p, err := New(Config{Client: api, Namespace: ns, PodName: podName, ClusterName: clusterName,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	require.NoError(t, err)
	s := &sink{}
	require.NoError(t, p.run(runArgs{log: testLogger(t, slog.LevelDebug), clusterName: clusterName,
		member: true, id: id, port: port, kinds: kinds, publish: s.publish}))
	t.Cleanup(func() { _ = p.Shutdown(true) })
	return &sinkMember{p: p, sink: s}
}

func TestOwnPodGetsTheMemberLabelsAndLosesThemOnShutdown(t *testing.T) {
	api := newFakeAPI(pod("wf-a", "10.0.0.1", true))
	// A previous incarnation's kind, which this one does not host.
	stale := api.pod(t, "wf-a")
	stale.Labels["cluster.shoppingmall/kind-gone"] = "true"
	api.update(t, stale)

	m := startSink(t, api, "wf-a", "member-a", 6330, "shoppingmall.order-workflow")
	m.sink.waitIDs(t, "member-a")

	l := api.pod(t, "wf-a").Labels
	require.Equal(t, map[string]string{
		"app.kubernetes.io/name":                                "order-workflow",
		"cluster.shoppingmall/cluster":                          clusterName,
		"cluster.shoppingmall/member-id":                        "member-a",
		"cluster.shoppingmall/port":                             "6330",
		"cluster.shoppingmall/kind-shoppingmall.order-workflow": "true",
	}, l)
	got := m.sink.member("member-a")
	require.Equal(t, &pcluster.Member{Id: "member-a", Host: "10.0.0.1", Port: 6330, Kinds: []string{"shoppingmall.order-workflow"}}, got)

	require.NoError(t, m.p.Shutdown(true))
	require.Equal(t, map[string]string{"app.kubernetes.io/name": "order-workflow"}, api.pod(t, "wf-a").Labels,
		"a graceful shutdown removes the member labels and only them")
}

func TestMembersSeeEachOtherAndNotReadyPodsCount(t *testing.T) {
	api := newFakeAPI(pod("wf-a", "10.0.0.1", true), pod("wf-b", "10.0.0.2", false), pod("api-a", "10.0.0.3", false))
	a := startSink(t, api, "wf-a", "member-a", 6330, "k")
	a.sink.waitIDs(t, "member-a")
	api.waitWatches(t, 1)
	b := startSink(t, api, "wf-b", "member-b", 6331, "k")
	b.sink.waitIDs(t, "member-a", "member-b")
	api.waitWatches(t, 2)
	c := startSink(t, api, "api-a", "member-c", 6332)
	for _, m := range []*sinkMember{a, b, c} {
		m.sink.waitIDs(t, "member-a", "member-b", "member-c")
	}
	require.Equal(t, &pcluster.Member{Id: "member-b", Host: "10.0.0.2", Port: 6331, Kinds: []string{"k"}}, a.sink.member("member-b"),
		"a pod whose container is not Ready is a member")
	require.Empty(t, a.sink.member("member-c").Kinds)
}

func TestPodsLeaveWhenDeletingDeletedOrNotMembers(t *testing.T) {
	api := newFakeAPI(pod("wf-a", "10.0.0.1", true))
	a := startSink(t, api, "wf-a", "member-a", 6330)
	a.sink.waitIDs(t, "member-a")
	api.waitWatches(t, 1)

	labelled := func(name, ip, id string) *v1.Pod {
		p := pod(name, ip, false)
		p.Labels["cluster.shoppingmall/cluster"] = clusterName
		p.Labels["cluster.shoppingmall/member-id"] = id
		p.Labels["cluster.shoppingmall/port"] = "6330"
		return p
	}
	for _, p := range []*v1.Pod{labelled("wf-b", "10.0.0.2", "member-b"), labelled("wf-c", "10.0.0.3", "member-c"), labelled("wf-d", "10.0.0.4", "member-d")} {
		_, err := api.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	a.sink.waitIDs(t, "member-a", "member-b", "member-c", "member-d")

	// Terminating: the API server sets DeletionTimestamp first.
	b := api.pod(t, "wf-b")
	now := metav1.Now()
	b.DeletionTimestamp = &now
	api.update(t, b)
	a.sink.waitIDs(t, "member-a", "member-c", "member-d")

	require.NoError(t, api.CoreV1().Pods(ns).Delete(context.Background(), "wf-c", metav1.DeleteOptions{}))
	a.sink.waitIDs(t, "member-a", "member-d")

	// No longer Running, then no longer labelled for this cluster.
	d := api.pod(t, "wf-d")
	d.Status.Phase = v1.PodFailed
	api.update(t, d)
	a.sink.waitIDs(t, "member-a")
	d = api.pod(t, "wf-d")
	d.Status.Phase = v1.PodRunning
	api.update(t, d)
	a.sink.waitIDs(t, "member-a", "member-d")
	d = api.pod(t, "wf-d")
	d.Labels["cluster.shoppingmall/cluster"] = "another"
	api.update(t, d)
	a.sink.waitIDs(t, "member-a")
}

func TestMemberOf(t *testing.T) {
	p, err := New(Config{Client: fake.NewSimpleClientset(), Namespace: ns, PodName: "x"})
	require.NoError(t, err)
	p.clusterName = clusterName
	member := func(mut func(*v1.Pod)) *pcluster.Member {
		po := pod("wf", "10.0.0.9", false)
		po.Labels["cluster.shoppingmall/cluster"] = clusterName
		po.Labels["cluster.shoppingmall/member-id"] = "id"
		po.Labels["cluster.shoppingmall/port"] = "6330"
		po.Labels["cluster.shoppingmall/kind-b"] = "true"
		po.Labels["cluster.shoppingmall/kind-a"] = "true"
		po.Labels["cluster.shoppingmall/kind-off"] = "false"
		mut(po)
		return p.memberOf(po)
	}
	require.Equal(t, &pcluster.Member{Id: "id", Host: "10.0.0.9", Port: 6330, Kinds: []string{"a", "b"}}, member(func(*v1.Pod) {}))
	for name, mut := range map[string]func(*v1.Pod){
		"pending":       func(p *v1.Pod) { p.Status.Phase = v1.PodPending },
		"no IP":         func(p *v1.Pod) { p.Status.PodIP = "" },
		"deleting":      func(p *v1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now },
		"other cluster": func(p *v1.Pod) { p.Labels["cluster.shoppingmall/cluster"] = "other" },
		"no id":         func(p *v1.Pod) { delete(p.Labels, "cluster.shoppingmall/member-id") },
		"bad port":      func(p *v1.Pod) { p.Labels["cluster.shoppingmall/port"] = "x" },
		"no port":       func(p *v1.Pod) { delete(p.Labels, "cluster.shoppingmall/port") },
	} {
		require.Nil(t, member(mut), name)
	}
}

func TestWatchErrorReLists(t *testing.T) {
	api := newFakeAPI(pod("wf-a", "10.0.0.1", true), pod("wf-b", "10.0.0.2", true))
	// The first watch is one the test controls; later ones are the
	// tracker's.
	first := watch.NewFake()
	var watchCalls atomic.Int32
	api.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		if watchCalls.Add(1) == 1 {
			return true, first, nil
		}
		return false, nil, nil
	})
	a := startSink(t, api, "wf-a", "member-a", 6330)
	a.sink.waitIDs(t, "member-a")
	require.Eventually(t, func() bool { return watchCalls.Load() >= 1 }, waitFor, tick)

	// The first watch misses this change ...
	b := api.pod(t, "wf-b")
	b.Labels["cluster.shoppingmall/cluster"] = clusterName
	b.Labels["cluster.shoppingmall/member-id"] = "member-b"
	b.Labels["cluster.shoppingmall/port"] = "6330"
	api.update(t, b)
	// ... and then fails: the re-list finds it.
	first.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 500, Reason: metav1.StatusReasonInternalError, Message: "boom"})
	a.sink.waitIDs(t, "member-a", "member-b")
	// The re-list lands before the next watch starts: wait for it.
	require.Eventually(t, func() bool { return watchCalls.Load() >= 2 }, waitFor, tick, "watched again after re-listing")
}

func TestRegistrationAndListRetryAfterAPIErrors(t *testing.T) {
	api := newFakeAPI(pod("wf-a", "10.0.0.1", true))
	var patches, lists atomic.Int32
	api.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if patches.Add(1) <= 2 {
			return true, nil, errors.New("api server unavailable")
		}
		return false, nil, nil
	})
	api.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if lists.Add(1) <= 2 {
			return true, nil, errors.New("api server unavailable")
		}
		return false, nil, nil
	})
	a := startSink(t, api, "wf-a", "member-a", 6330)
	a.sink.waitIDs(t, "member-a")
	require.EqualValues(t, 3, patches.Load(), "registered on the third patch")
	require.GreaterOrEqual(t, lists.Load(), int32(3), "listed after two failures")
}

func TestNewRejectsBadConfigAndLabels(t *testing.T) {
	_, err := New(Config{Namespace: ns, PodName: "x"})
	require.ErrorIs(t, err, ErrConfig)
	_, err = New(Config{Client: fake.NewSimpleClientset(), Namespace: ns, PodName: "x", LabelPrefix: "Not_A_Domain"})
	require.ErrorIs(t, err, ErrConfig)
	p, err := New(Config{Client: fake.NewSimpleClientset(), Namespace: ns, PodName: "x"})
	require.NoError(t, err)
	_, err = p.ownLabels(clusterName, "id", 6330, []string{"not a label"})
	require.ErrorIs(t, err, ErrConfig)
	_, err = p.ownLabels(clusterName, "id", 0, nil)
	require.ErrorIs(t, err, ErrConfig)
}
