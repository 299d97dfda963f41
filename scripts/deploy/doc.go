// Package deploy holds the deployment of ShoppingMall and the tests that
// keep it honest where no container runtime or Kubernetes runs: the
// Dockerfile and build.sh (static commerce-api, order-workflow and prestop
// executables, CGO off, -tags k8s, on an empty base), the manifests under
// k8s/, prestop/ (the preStop delay), and observability/ (Prometheus alert
// rules with their promtool unit test, and a Grafana dashboard). Its tests
// run build.sh and read the executables' ELF headers, decode every
// manifest strictly into the typed Kubernetes API objects and check their
// cross-references and that every flag they set exists in the binary that
// reads it, and check that every metric, label and label value the alert
// rules and the dashboard query is one the module's source registers.
//
// It holds no production code. Its tests must not import any package of
// this module: they look at the deployment from outside, through the
// built executables and the source as text.
package deploy
