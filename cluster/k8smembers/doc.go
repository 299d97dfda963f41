//go:build k8s

// Package k8smembers is the Kubernetes membership provider of a protoactor
// cluster member (cluster.ClusterProvider). It owns two things: its own
// pod's membership labels (cluster name, member id, remote port, hosted
// kinds), which it merge-patches on start and removes on a graceful
// shutdown, and the topology it reads back from the labelled pods of its
// namespace (list, then watch; re-list with backoff whenever the watch
// ends) and hands to the member list.
//
// It exists instead of protoactor's own k8s provider for two reasons. The
// member id in the labels is the actor system's id, as with the other
// providers: the placement lookup is ready, and ownership records and
// self-fencing name a member, only by that id. And a pod counts as a
// member once it is Running with an IP and not being deleted, whatever
// its readiness: a member's /readyz turns ready only after it sees itself
// in the topology, so counting ready pods only would keep every pod out.
//
// A pod whose process died without leaving keeps its labels while the pod
// stays Running (a container restart): its old id stays in the topology
// until the restarted process relabels the pod. The lookup's endpoint
// termination fails calls to it meanwhile; nothing fails over by itself.
//
// It is a leaf adapter: it imports protoactor's cluster package, the
// Kubernetes client and no package of this module but the leaf
// cluster/retry (its backoff); it must not import
// the Location Store, placement, stores or anything of orders or HTTP.
// Every file is behind the k8s build tag, as is its only user
// (cluster/provider_k8s.go).
package k8smembers
