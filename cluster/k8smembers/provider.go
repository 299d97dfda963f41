//go:build k8s

package k8smembers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/shoppingmall-go/shoppingmall/cluster/retry"
)

// DefaultLabelPrefix is the label key prefix (a DNS subdomain) when
// Config.LabelPrefix is empty. It differs from protoactor's own provider's
// so that the two never read each other's members.
const DefaultLabelPrefix = "cluster.shoppingmall"

// Label names under the prefix: <prefix>/<name>.
const (
	labelCluster  = "cluster"
	labelMemberID = "member-id"
	labelPort     = "port"
	labelKind     = "kind-" // one label per hosted kind, value "true"
)

// ErrConfig: the Config cannot make a provider, or the member's labels
// would not be valid Kubernetes labels.
var ErrConfig = errors.New("k8smembers: invalid configuration")

// Config configures one member's provider.
type Config struct {
	// Client reaches the API server (in a pod: the in-cluster config).
	Client kubernetes.Interface
	// Namespace holds this pod and every other member's pod.
	Namespace string
	// PodName is this member's own pod, the one it labels.
	PodName string
	// ClusterName is the cluster label's value; "" uses the protoactor
	// cluster's name. Pods labelled for another cluster are not members.
	ClusterName string
	// LabelPrefix is the labels' key prefix, a DNS subdomain without the
	// slash; "" means DefaultLabelPrefix. A graceful shutdown removes every
	// label under it from the pod.
	LabelPrefix string
	// APITimeout bounds each get, patch and list; 0 means 5 s.
	APITimeout time.Duration
	// WatchTimeout asks the server to end each watch after this long, so
	// that the member re-lists at least that often; 0 means 5 min.
	WatchTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before retrying a failed
	// registration, list or watch (cluster/retry: doubling per failure,
	// with full jitter);
	// 0 means 200 ms and 10 s. A watch that ended normally is re-listed
	// after MinBackoff.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// Logger; nil uses the protoactor cluster's logger.
	Logger *slog.Logger
}

// Provider implements protoactor's cluster.ClusterProvider on the pods of
// one namespace. Use one Provider per member.
type Provider struct {
	cfg Config

	// Set at start, read by the loop and Shutdown.
	log          *slog.Logger
	clusterName  string
	selector     string
	member       bool
	own          map[string]string
	publish      func(pcluster.Members)
	cancel       context.CancelFunc
	done         chan struct{}
	startOnce    sync.Once
	shutdownOnce sync.Once
}

var _ pcluster.ClusterProvider = (*Provider)(nil)

// New checks cfg and fills its defaults; the provider talks to the API
// server only once started.
func New(cfg Config) (*Provider, error) {
	if cfg.Client == nil || cfg.Namespace == "" || cfg.PodName == "" {
		return nil, fmt.Errorf("%w: Client, Namespace and PodName are required", ErrConfig)
	}
	if cfg.LabelPrefix == "" {
		cfg.LabelPrefix = DefaultLabelPrefix
	}
	if errs := validation.IsDNS1123Subdomain(cfg.LabelPrefix); len(errs) > 0 {
		return nil, fmt.Errorf("%w: LabelPrefix %q: %s", ErrConfig, cfg.LabelPrefix, strings.Join(errs, "; "))
	}
	if cfg.ClusterName != "" {
		if errs := validation.IsValidLabelValue(cfg.ClusterName); len(errs) > 0 {
			return nil, fmt.Errorf("%w: ClusterName %q: %s", ErrConfig, cfg.ClusterName, strings.Join(errs, "; "))
		}
	}
	if cfg.APITimeout <= 0 {
		cfg.APITimeout = 5 * time.Second
	}
	if cfg.WatchTimeout <= 0 {
		cfg.WatchTimeout = 5 * time.Minute
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 200 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(10*time.Second, cfg.MinBackoff)
	}
	return &Provider{cfg: cfg}, nil
}

// StartMember labels this member's pod with the actor system's id, its
// remote port and its kinds, and keeps the member list at the labelled
// pods. It returns at once: registration and the watch run in the
// background and retry until Shutdown, since protoactor panics on an
// error here. The error it does return is a label that Kubernetes would
// never accept (a kind name or cluster name).
func (p *Provider) StartMember(c *pcluster.Cluster) error {
	_, port, err := c.ActorSystem.GetHostPort()
	if err != nil {
		return fmt.Errorf("k8smembers: member address: %w", err)
	}
	return p.start(c, true, c.ActorSystem.ID, port, c.GetClusterKinds())
}

// StartClient keeps the member list at the labelled pods without
// labelling this one.
func (p *Provider) StartClient(c *pcluster.Cluster) error {
	return p.start(c, false, "", 0, nil)
}

func (p *Provider) start(c *pcluster.Cluster, member bool, id string, port int, kinds []string) error {
	name := p.cfg.ClusterName
	if name == "" {
		name = c.Config.Name
	}
	log := p.cfg.Logger
	if log == nil {
		log = c.Logger()
	}
	return p.run(runArgs{
		log: log, clusterName: name, member: member, id: id, port: port, kinds: kinds,
		publish: c.MemberList.UpdateClusterTopology,
	})
}

// runArgs is what a start takes from the protoactor cluster; tests hand
// it directly.
type runArgs struct {
	log         *slog.Logger
	clusterName string
	member      bool
	id          string
	port        int
	kinds       []string
	publish     func(pcluster.Members)
}

func (p *Provider) run(a runArgs) error {
	if errs := validation.IsValidLabelValue(a.clusterName); len(errs) > 0 {
		return fmt.Errorf("%w: cluster name %q: %s", ErrConfig, a.clusterName, strings.Join(errs, "; "))
	}
	var own map[string]string
	if a.member {
		var err error
		if own, err = p.ownLabels(a.clusterName, a.id, a.port, a.kinds); err != nil {
			return err
		}
	}
	started := false
	p.startOnce.Do(func() {
		started = true
		ctx, cancel := context.WithCancel(context.Background())
		p.log, p.clusterName, p.member, p.own, p.publish = a.log, a.clusterName, a.member, own, a.publish
		p.selector = p.key(labelCluster) + "=" + a.clusterName
		p.cancel, p.done = cancel, make(chan struct{})
		go p.loop(ctx)
	})
	if !started {
		return errors.New("k8smembers: provider already started; use one per member")
	}
	return nil
}

func (p *Provider) key(name string) string { return p.cfg.LabelPrefix + "/" + name }

// ownLabels are the labels this member puts on its pod.
func (p *Provider) ownLabels(clusterName, id string, port int, kinds []string) (map[string]string, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("%w: remote port %d", ErrConfig, port)
	}
	l := map[string]string{
		p.key(labelCluster):  clusterName,
		p.key(labelMemberID): id,
		p.key(labelPort):     strconv.Itoa(port),
	}
	for _, k := range kinds {
		l[p.key(labelKind+k)] = "true"
	}
	for k, v := range l {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("%w: label key %q: %s", ErrConfig, k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, fmt.Errorf("%w: label %q value %q: %s", ErrConfig, k, v, strings.Join(errs, "; "))
		}
	}
	return l, nil
}

// Shutdown stops the watch, so that nothing reaches the member list after
// it returns, and then, for a member, removes its labels from its pod.
// The removal is best effort: a pod that is going away takes its labels
// with it, and an error is only returned (protoactor ignores it).
func (p *Provider) Shutdown(bool) error {
	var err error
	p.shutdownOnce.Do(func() {
		if p.cancel == nil {
			return
		}
		p.cancel()
		<-p.done
		if !p.member {
			return
		}
		if err = p.unregister(); err != nil {
			p.log.Warn("k8s membership: removing the pod's labels failed", slog.String("pod", p.cfg.PodName), slog.Any("error", err))
		} else {
			p.log.Info("k8s membership: left", slog.String("pod", p.cfg.PodName))
		}
	})
	return err
}

func (p *Provider) loop(ctx context.Context) {
	defer close(p.done)
	b := retry.Backoff(p.cfg.MinBackoff, p.cfg.MaxBackoff)
	if p.member {
		for {
			err := p.register(ctx)
			if err == nil {
				p.log.Info("k8s membership: pod labelled", slog.String("pod", p.cfg.PodName), slog.String("namespace", p.cfg.Namespace))
				break
			}
			if ctx.Err() != nil {
				return
			}
			wait := b.NextBackOff()
			p.log.Warn("k8s membership: labelling the pod failed; retrying", slog.String("pod", p.cfg.PodName),
				slog.Duration("backoff", wait), slog.Any("error", err))
			if !sleep(ctx, wait) {
				return
			}
		}
	}
	b.Reset()
	for {
		err := p.listAndWatch(ctx)
		if ctx.Err() != nil {
			return
		}
		wait := p.cfg.MinBackoff
		if err != nil {
			wait = b.NextBackOff()
			p.log.Warn("k8s membership: pod list or watch failed; re-listing", slog.Duration("backoff", wait), slog.Any("error", err))
		} else {
			b.Reset()
		}
		if !sleep(ctx, wait) {
			return
		}
	}
}

// register merge-patches this member's labels onto its pod, and clears
// labels under the prefix that it no longer carries (a previous
// incarnation's kinds); the pod's other labels stay as they are.
func (p *Provider) register(ctx context.Context) error {
	return p.patchLabels(ctx, p.own)
}

func (p *Provider) unregister() error {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.APITimeout)
	defer cancel()
	return p.patchLabels(ctx, nil)
}

// patchLabels makes the pod's labels under the prefix exactly want.
func (p *Provider) patchLabels(ctx context.Context, want map[string]string) error {
	pods := p.cfg.Client.CoreV1().Pods(p.cfg.Namespace)
	gctx, cancel := context.WithTimeout(ctx, p.cfg.APITimeout)
	pod, err := pods.Get(gctx, p.cfg.PodName, metav1.GetOptions{})
	cancel()
	if err != nil {
		return fmt.Errorf("get own pod %s/%s: %w", p.cfg.Namespace, p.cfg.PodName, err)
	}
	change := map[string]any{}
	for k := range pod.Labels {
		if _, keep := want[k]; !keep && strings.HasPrefix(k, p.cfg.LabelPrefix+"/") {
			change[k] = nil // a merge patch deletes a key set to null
		}
	}
	for k, v := range want {
		if pod.Labels[k] != v {
			change[k] = v
		}
	}
	if len(change) == 0 {
		return nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": change}})
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, p.cfg.APITimeout)
	defer cancel()
	if _, err := pods.Patch(pctx, p.cfg.PodName, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch own pod %s/%s labels: %w", p.cfg.Namespace, p.cfg.PodName, err)
	}
	return nil
}

// listAndWatch publishes the listed members, then every change the watch
// reports, until the watch ends. nil means it ended normally (the server's
// timeout, or a resource version too old to resume from): re-list.
func (p *Provider) listAndWatch(ctx context.Context) error {
	pods := p.cfg.Client.CoreV1().Pods(p.cfg.Namespace)
	lctx, cancel := context.WithTimeout(ctx, p.cfg.APITimeout)
	list, err := pods.List(lctx, metav1.ListOptions{LabelSelector: p.selector})
	cancel()
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	members := map[types.UID]*pcluster.Member{}
	for i := range list.Items {
		if m := p.memberOf(&list.Items[i]); m != nil {
			members[list.Items[i].UID] = m
		}
	}
	p.publishMembers(members)

	timeout := int64(p.cfg.WatchTimeout / time.Second)
	w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: p.selector, ResourceVersion: list.ResourceVersion, TimeoutSeconds: &timeout})
	if err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			switch ev.Type {
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					return nil
				}
				return fmt.Errorf("watch pods: %w", err)
			case watch.Bookmark:
				continue
			}
			pod, ok := ev.Object.(*v1.Pod)
			if !ok {
				continue
			}
			var m *pcluster.Member
			if ev.Type != watch.Deleted {
				m = p.memberOf(pod)
			}
			old, had := members[pod.UID]
			if m == nil {
				if !had {
					continue
				}
				delete(members, pod.UID)
			} else {
				if had && reflect.DeepEqual(old, m) {
					continue
				}
				members[pod.UID] = m
			}
			p.publishMembers(members)
		}
	}
}

func (p *Provider) publishMembers(byPod map[types.UID]*pcluster.Member) {
	out := make(pcluster.Members, 0, len(byPod))
	seen := map[string]bool{}
	for _, m := range byPod {
		if !seen[m.Id] {
			seen[m.Id] = true
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b *pcluster.Member) int { return strings.Compare(a.Id, b.Id) })
	p.publish(out)
}

// memberOf is the member a pod stands for, or nil. A member's pod is
// Running with an IP, is not being deleted and carries this cluster's
// labels; container readiness does not count, since a member's readiness
// waits for it to see itself here.
func (p *Provider) memberOf(pod *v1.Pod) *pcluster.Member {
	l := pod.Labels
	if l[p.key(labelCluster)] != p.clusterName || pod.DeletionTimestamp != nil ||
		pod.Status.Phase != v1.PodRunning || pod.Status.PodIP == "" {
		return nil
	}
	id := l[p.key(labelMemberID)]
	port, err := strconv.Atoi(l[p.key(labelPort)])
	if id == "" || err != nil || port <= 0 || port > 65535 {
		return nil
	}
	var kinds []string
	kindPrefix := p.key(labelKind)
	for k, v := range l {
		if v == "true" && strings.HasPrefix(k, kindPrefix) {
			kinds = append(kinds, strings.TrimPrefix(k, kindPrefix))
		}
	}
	slices.Sort(kinds)
	return &pcluster.Member{Id: id, Host: pod.Status.PodIP, Port: int32(port), Kinds: kinds}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
