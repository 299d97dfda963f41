# ShoppingMall-Go. `make cluster-up` runs the system, `make test` runs the tests,
# `make check` the quick gate before a commit (docs/testing.md).
SHELL := /bin/bash
GO ?= go
# Every go command below, and every `go build` a test or runner starts
# (they inherit the environment), compiles with the checkout's folder
# trimmed from its paths: without it the folder is part of each package's
# build-cache key, so a fresh clone recompiles everything the first clone
# already compiled. The user's own GOFLAGS (the environment's or
# `go env -w`'s) are kept.
export GOFLAGS := $(strip $(filter-out -trimpath,$(shell $(GO) env GOFLAGS 2>/dev/null)) -trimpath)
# Packages that start several protoactor members in one process run without
# -race: protoactor's remote.Start writes grpc's global logger at every
# member start (a race inside the library, not ours).
MULTI_MEMBER := ./cluster/clustertest/... ./edge/edgetest/...
RUN_DIR ?= $(CURDIR)/.run
# REDIS_CLUSTER=1 runs `make smoke`, `make bench` and `make cluster-up` on a
# local 3-master Redis Cluster instead of one redis-server (their
# -redis-cluster flag).
REDIS_CLUSTER ?=
REDIS_CLUSTER_FLAG = $(if $(filter 1 yes true,$(REDIS_CLUSTER)),-redis-cluster $(if $(REDIS_CLUSTER_REPLICAS),-redis-cluster-replicas $(REDIS_CLUSTER_REPLICAS)))
# Redis as production runs it, for `make cluster-up` (and REDIS_HA for
# `make soak`): REDIS_CLUSTER_REPLICAS=1 gives each master of
# REDIS_CLUSTER=1's cluster a replica; REDIS_HA=sentinel runs a primary, two
# replicas and three sentinels instead of one redis-server. Either way
# cluster-node-timeout / down-after-milliseconds are 2 s and every
# process runs with -redis-wait-replicas 1.
REDIS_CLUSTER_REPLICAS ?=
REDIS_HA ?=
REDIS_HA_FLAG = $(if $(REDIS_HA),-redis-ha $(REDIS_HA))
# ARCHIVE=1 runs `make cluster-up` with a PostgreSQL archive under the run
# dir (docs/archive.md), every node started with -archive; `make
# cluster-down` stops it after the nodes.
ARCHIVE ?=
ARCHIVE_FLAG = $(if $(filter 1 yes true,$(ARCHIVE)),-archive)
# RETENTION=30s (with ARCHIVE=1) starts the workflows with -retention:
# finished orders move to the archive after it (docs/archive.md).
RETENTION ?=
RETENTION_FLAG = $(if $(RETENTION),-retention $(RETENTION))
# The linter version `make lint` installs and runs (.golangci.yml holds the
# rules). Pinned: a new release brings new findings, so upgrading is a
# change of its own.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT = $(firstword $(subst :, ,$(shell $(GO) env GOPATH)))/bin/golangci-lint

.PHONY: test test-tools check test-one test-bin fmt-check vet lint upgrade-test k8s-compile k8s-test alerts-test store-evidence archive-test retention-test postgres unit failover-test fault-test overload-test admin-test metrics-test pause-test stall-test partition-test takeover-test scale-test redis-cluster-test deploy-test multi-member redis proto build cluster-up cluster-down seed smoke bench bench-peers peers-check soak

# make test runs its targets in TEST_JOBS parallel jobs (default 3; 1
# runs them one after another). The targets that keep the cores busy
# (TEST_CPU: the linter, the -race unit stage, the overload and spread
# proofs, the image builds) run one after another, never beside each
# other; the ones that mostly wait on real processes, leases and
# failovers (TEST_WAITING, longest first) fill the other jobs. Every test
# has its own ports, Redis servers, run folder and cgroups, so they share
# nothing but the cores. The tools the targets install (apt takes one
# install at a time) and the process binaries are made first, once.
# Each target's output is printed whole when it ends. Where the time
# goes: docs/testing.md ("Where the time goes").
TEST_JOBS ?= 3
TEST_CPU := fmt-check peers-check vet lint k8s-compile alerts-test unit overload-test scale-test deploy-test compose-test
TEST_WAITING := failover-test multi-member upgrade-test stall-test partition-test fault-test takeover-test redis-cluster-test metrics-test pause-test admin-test archive-test retention-test k8s-test store-evidence

test: test-tools test-bin
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) -Otarget TEST_LANES=1 $(TEST_CPU) $(TEST_WAITING)

# Within make test's run, TEST_CPU as a chain: each waits for the one
# before it (order-only, so `make unit` alone still runs unit alone).
ifdef TEST_LANES
peers-check: | fmt-check
vet: | peers-check
lint: | vet
k8s-compile: | lint
alerts-test: | k8s-compile
unit: | alerts-test
overload-test: | unit
scale-test: | overload-test
deploy-test: | scale-test
compose-test: | deploy-test
endif

# What make test's targets install when missing, installed one at a time
# before they run side by side: redis-server and redis-sentinel, Debian's
# PostgreSQL server (the archive's tests), iptables
# (without it the partition proofs fail, as partition-test does alone),
# promtool. Docker, which only compose-test needs, it installs itself.
test-tools:
	@bash scripts/install-redis.sh sentinel
	@bash scripts/install-postgres.sh >/dev/null
	@bash scripts/install-iptables.sh >/dev/null || echo "test-tools: iptables could not be installed" >&2
	@bash scripts/install-prometheus.sh >/dev/null

# The quick gate before a commit: formatting, vet, the linter and the unit
# stage of `make test` (go test -race of the packages its own targets leave
# out), without those targets.
check: redis postgres fmt-check vet lint unit

redis:
	@bash scripts/install-redis.sh $(if $(REDIS_HA),sentinel)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi; echo "gofmt: clean"

vet:
	$(GO) vet ./...

# Installs golangci-lint $(GOLANGCI_LINT_VERSION) into $(go env GOPATH)/bin
# when it is missing or another version, then runs it: the layer rules
# (depguard, one list per package doc's "must not import"), errcheck,
# staticcheck, sloglint, forbidigo and goimports.
lint:
	@if ! "$(GOLANGCI_LINT)" version 2>/dev/null | grep -qF 'version $(patsubst v%,%,$(GOLANGCI_LINT_VERSION)) '; then \
	  echo "installing golangci-lint $(GOLANGCI_LINT_VERSION)"; \
	  rm -f "$(GOLANGCI_LINT)"; \
	  GOBIN="$(dir $(GOLANGCI_LINT))" $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) || exit 1; \
	fi
	"$(GOLANGCI_LINT)" run ./...
	"$(GOLANGCI_LINT)" run --build-tags k8s ./cluster/ ./cluster/k8smembers/...
	"$(GOLANGCI_LINT)" run --build-tags upgradetest,strictreader ./actors/contracts/ ./actors/workflow/ ./runner/localcluster/upgradetest/

# The k8s membership provider sits behind a build tag (no Kubernetes runs
# here); this keeps it compiling.
k8s-compile:
	$(GO) vet -tags k8s ./cluster/

# The k8s membership provider (cluster/k8smembers) against client-go's fake
# API, with real protoactor members in one process: no -race.
k8s-test:
	$(GO) test -tags k8s -count=1 ./cluster/k8smembers/...

# The alert rules (scripts/deploy/observability): promtool, from Debian's
# prometheus package (installed when missing), checks alerts.yaml and runs
# its unit test, alerts_test.yaml, which makes every alert fire and stay
# quiet. That the rules and the dashboard name only registered metrics is
# deploy-test's.
ALERTS_DIR := scripts/deploy/observability
alerts-test:
	@bash scripts/install-prometheus.sh >/dev/null
	promtool check rules $(ALERTS_DIR)/alerts.yaml
	promtool test rules $(ALERTS_DIR)/alerts_test.yaml

# build-bins,DIR builds the two process binaries into DIR (`build` for
# cluster-up's .run/bin, `test-bin` for the tests).
build-bins = mkdir -p $(1) && $(GO) build -o $(1)/ ./edge/cmd/commerce-api ./actors/cmd/order-workflow

# commerce-api and order-workflow, built once per make run for every test
# that starts them as processes: runner/localcluster/proctest takes them
# from SHOPPINGMALL_TEST_BIN_DIR instead of linking a pair per test binary.
# go build relinks only when a source changed.
TEST_BIN_DIR := $(RUN_DIR)/test-bin
export SHOPPINGMALL_TEST_BIN_DIR := $(TEST_BIN_DIR)
test-bin:
	@$(call build-bins,$(TEST_BIN_DIR))
# The soaks (failover-test's and make soak) run the same pair.
SOAK_BINS = -api-bin $(TEST_BIN_DIR)/commerce-api -workflow-bin $(TEST_BIN_DIR)/order-workflow

unit: test-bin postgres
	$(GO) test -race -count=1 -skip '^($(FAILOVER_TESTS))$$' $$($(GO) list ./... | grep -v -e /eventstore/archive -e /runner/pgserver -e /actors/archiver -e /cluster/clustertest -e /edge/edgetest -e /runner/localcluster/faulttest -e /runner/localcluster/overloadtest -e /runner/localcluster/admintest -e /runner/localcluster/metricstest -e /runner/localcluster/pausetest -e /runner/localcluster/stalltest -e /runner/localcluster/partition -e /runner/localcluster/takeovertest -e /runner/localcluster/scaletest -e /runner/localcluster/redisclustertest -e /runner/localcluster/upgradetest -e /scripts/deploy)

# One package, or some of its tests, with the flags `make test` gives that
# package, for the loop of one change (docs/testing.md):
#   make test-one PKG=./eventstore RUN=TestRedisContract
#   make test-one PKG=./runner/localcluster/pausetest
# -race everywhere but the multi-member packages and scripts/deploy (as
# their targets run them), -tags k8s for the k8s membership provider; the
# Redis tools the package's tests start (sentinels for actors/node's
# failover tests, iptables for the partition packages) are installed
# first, as their targets do. -v; TESTFLAGS may add e.g. -count 5.
PKG ?=
RUN ?=
TESTFLAGS ?=
test-one: redis test-bin
	@pkg='$(PKG)'; if [ -z "$$pkg" ]; then echo 'usage: make test-one PKG=./some/package [RUN=regexp] [TESTFLAGS=...]' >&2; exit 2; fi; \
	case "$${pkg#./}" in \
	  cluster/clustertest*|edge/edgetest*|scripts/deploy*) flags='' ;; \
	  cluster/k8smembers*) flags='-tags k8s' ;; \
	  *) flags='-race' ;; \
	esac; \
	case "$${pkg#./}" in \
	  actors/node*|runner/localcluster/redisclustertest*) bash scripts/install-redis.sh sentinel >/dev/null || exit 1 ;; \
	  eventstore/archive*|runner/pgserver*|actors/archiver*) bash scripts/install-postgres.sh >/dev/null || exit 1 ;; \
	  runner/localcluster/partition*) bash scripts/install-iptables.sh >/dev/null || exit 1 ;; \
	esac; \
	set -x; $(GO) test $$flags -count=1 -timeout 10m -v $(if $(RUN),-run '$(RUN)') $(TESTFLAGS) "$$pkg"

# Real-process proofs of durability across a store failover, which `unit`
# leaves to this target: Sentinel promoting a replica after the primary's
# SIGKILL, a lagging (SIGSTOPped) replica losing nothing acknowledged,
# writes waiting for their replica on one server and on a Redis Cluster
# whose master is then SIGKILLed (actors/node); the local cluster on a
# Redis Cluster with a replica per master, one master SIGKILLed under
# order load (runner/localcluster/redisclustertest); then the soak: on
# the Sentinel topology (1 primary, 2 replicas, 3 sentinels, WAIT 1) the
# primary's SIGKILL alone and -strict (the run fails unless a replica was
# promoted, every API acknowledged new orders afterwards and every
# acknowledged order finished without an operator); the lagging
# replica alone and -strict (the replicas SIGSTOPped until writes answer
# 503 in doubt, the primary SIGKILLed, the replicas resumed and one
# promoted); a Redis Cluster with one replica per master, its first
# master SIGKILLed alone and -strict (the local supervisor starts it
# again as its successor's replica); then the whole fault schedule on
# Sentinel. The invariant checker, stock included, judges all four.
# Prints the figures (the whole output when it fails).
CLUSTER_FAILOVER_TEST := TestAMasterKilledUnderLoadLosesNothing
FAILOVER_TESTS := TestStoresFollowASentinelFailover|TestALaggingReplicaLosesNothingAcknowledged|TestWritesWaitForTheReplica|TestClusterWritesWaitForTheirMastersReplica
failover-test: test-bin
	@bash scripts/install-redis.sh sentinel >/dev/null
	@bash scripts/install-iptables.sh >/dev/null || echo "failover-test: no iptables: the soak's partition fault is skipped" >&2
	@out=$$($(GO) test -race -count=1 -timeout 6m -v -run '^($(FAILOVER_TESTS))$$' ./actors/node/ 2>&1); rc=$$?; \
	if [ $$rc -ne 0 ]; then printf '%s\n' "$$out"; exit $$rc; fi; \
	printf '%s\n' "$$out" | grep -E '^(--- |ok )|FIGURE'
	@out=$$($(GO) test -race -count=1 -timeout 5m -v -run '^$(CLUSTER_FAILOVER_TEST)$$' ./runner/localcluster/redisclustertest/ 2>&1); rc=$$?; \
	if [ $$rc -ne 0 ]; then printf '%s\n' "$$out"; exit $$rc; fi; \
	printf '%s\n' "$$out" | grep -E '^(--- |ok )|FIGURE'
	@out=$$($(GO) run ./runner/soak -run-dir $(RUN_DIR)/failover-only $(SOAK_BINS) -redis-ha sentinel -only redis-failover -strict -duration 20s -seed 11 2>&1); rc=$$?; \
	if [ $$rc -ne 0 ]; then printf '%s\n' "$$out"; exit $$rc; fi; \
	printf '%s\n' "$$out" | grep -E 'FIGURE|SOAK|acknowledged|failover|violations|^  [a-z_]+ +[0-9]+$$'
	@out=$$($(GO) run ./runner/soak -run-dir $(RUN_DIR)/failover-lagging $(SOAK_BINS) -redis-ha sentinel -only redis-lagging-failover -strict -duration 20s -seed 11 2>&1); rc=$$?; \
	if [ $$rc -ne 0 ]; then printf '%s\n' "$$out"; exit $$rc; fi; \
	printf '%s\n' "$$out" | grep -E 'FIGURE|SIGSTOP|SIGCONT|SOAK|acknowledged|failover|violations|^  [a-z_]+ +[0-9]+$$'
	@out=$$($(GO) run ./runner/soak -run-dir $(RUN_DIR)/failover-master $(SOAK_BINS) -redis-cluster-replicas 1 -only redis-master-kill -strict -duration 20s -seed 11 2>&1); rc=$$?; \
	if [ $$rc -ne 0 ]; then printf '%s\n' "$$out"; exit $$rc; fi; \
	printf '%s\n' "$$out" | grep -E 'FIGURE|SIGKILL redis|SOAK|acknowledged|failover|violations|^  [a-z_]+ +[0-9]+$$'
	@out=$$($(GO) run ./runner/soak -run-dir $(RUN_DIR)/failover-soak $(SOAK_BINS) -redis-ha sentinel -duration 40s -seed 11 2>&1); rc=$$?; \
	if [ $$rc -ne 0 ]; then printf '%s\n' "$$out"; exit $$rc; fi; \
	printf '%s\n' "$$out" | grep -E 'FIGURE|SOAK|acknowledged|redis-failover|violations|^  [a-z_]+ +[0-9]+$$'

# Real-process fault proofs (runner/localcluster/faulttest): Redis SIGKILLed and
# restarted from its AOF under load, a workflow member frozen during cold
# starts. Under -race. Its own target rather than part of unit, but no
# longer alone: make test runs it beside the CPU-bound chain and another
# waiting target, and it passed there in every measured run
# (docs/testing.md, "Where the time goes"); its assertions are on
# outcomes (nothing lost, every order terminal), not on durations.
fault-test: test-bin
	$(GO) test -race -count=1 -timeout 8m ./runner/localcluster/faulttest/

# Real-process proof of admission control (runner/localcluster/overloadtest): an
# open loop at 4x the measured closed-loop capacity, bounded in time and count;
# every answer 201/200 or a 503/504 with a reason and Retry-After (none 500
# INTERNAL or NO_ELIGIBLE_MEMBER), no self-fence or restart, every acknowledged
# order terminal within 60 s with no continue; prints the figures (the whole
# output when it fails).
overload-test: test-bin
	@out=$$($(GO) test -race -count=1 -timeout 5m -v ./runner/localcluster/overloadtest/ 2>&1); rc=$$?; \
	if [ $$rc -ne 0 ]; then printf '%s\n' "$$out"; exit $$rc; fi; \
	printf '%s\n' "$$out" | grep -E '^(--- |ok )|FIGURE'

# Real-process proof of the locked admin surface (runner/localcluster/admintest):
# 401 without or with a wrong token, 404 on the public port, 200 with it;
# the stuck-order report lists a held order and -resume finishes it; an
# archived order of each kind answers every question as before and writes
# nothing, and with PostgreSQL SIGKILLed rebuild and the timeline are 503.
admin-test: test-bin postgres
	$(GO) test -race -count=1 -timeout 5m ./runner/localcluster/admintest/

# The archive (eventstore/archive, the cold tier of the event store) and
# its server harness (runner/pgserver), against a real PostgreSQL each test
# starts on a free port, run as an unprivileged user, and stops by PID:
# the suites, a many-goroutine race on one order, and a server stalled
# (SIGSTOP), SIGKILLed and restarted under a retried write.
archive-test: postgres
	$(GO) test -race -count=1 -timeout 5m ./eventstore/archive/... ./runner/pgserver/...

# The archiver (actors/archiver): finished orders past their retention
# leave Redis for the archive, against a real redis-server and a real
# PostgreSQL: the archiver killed between each pair of its steps leaves
# every kind of order hot or archived and another finishes it; repairs
# not done keep an order hot; three archivers share the shards under
# leases and one stalled mid-batch leaves its shard to the others;
# PostgreSQL SIGKILLed mid-pass delays archival and loses nothing; what
# stays of an archived order, measured.
retention-test: postgres redis
	$(GO) test -race -count=1 -timeout 5m ./actors/archiver/...

postgres:
	@bash scripts/install-postgres.sh >/dev/null

# Real-process proof of the metrics (runner/localcluster/metricstest): one
# order moves its owner's /metrics by exactly its deltas, the other node's
# by none.
metrics-test: test-bin
	$(GO) test -race -count=1 -timeout 5m ./runner/localcluster/metricstest/

# Real-process proof of self-fencing (runner/localcluster/pausetest): a workflow
# owning orders is SIGSTOPped 3.5 s, is recorded gone, fences itself, exits
# 3 and is restarted by the supervisor; one paused while it was recorded
# gone and pruned fences on waking; 12 SIGKILL restarts under light load
# leave the membership keys bounded once pruned. Prints the figures (the
# whole output when it fails). About 57 s.
pause-test: test-bin
	@out=$$($(GO) test -race -count=1 -timeout 5m -v ./runner/localcluster/pausetest/ 2>&1); rc=$$?; \
	if [ $$rc -ne 0 ]; then printf '%s\n' "$$out"; exit $$rc; fi; \
	printf '%s\n' "$$out" | grep -E '^(--- |ok )|FIGURE'

# Real-process proofs of a stalled store (runner/localcluster/stalltest):
# redis-server frozen with SIGSTOP, and SIGKILLed then restarted from its
# AOF, for 7 s against a 3 s lease under light load; the members suspend
# and resume, none restarts, every acknowledged or retried order is
# terminal; a workflow SIGSTOPped for longer than the lease fences on the
# gap. Prints the figures (the whole output when it fails).
stall-test: test-bin
	@out=$$($(GO) test -race -count=1 -timeout 6m -v ./runner/localcluster/stalltest/ 2>&1); rc=$$?; \
	if [ $$rc -ne 0 ]; then printf '%s\n' "$$out"; exit $$rc; fi; \
	printf '%s\n' "$$out" | grep -E '^(--- |ok )|FIGURE'

# Real-process proof of a partition (runner/localcluster/partitiontest): api-a
# and workflow-a cut apart for 8 s on loopback (iptables by cgroup; installed
# when missing) while both reach Redis and the rest; workflow-a is not
# recorded gone, its orders are served through api-b and answer
# OWNER_UNREACHABLE through api-a, and through both once healed. Prints the
# figures (the whole output when it fails).
partition-test: test-bin
	@bash scripts/install-iptables.sh >/dev/null
	@out=$$($(GO) test -race -count=1 -timeout 5m -v ./runner/localcluster/partition/ ./runner/localcluster/partitiontest/ 2>&1); rc=$$?; \
	if [ $$rc -ne 0 ]; then printf '%s\n' "$$out"; exit $$rc; fi; \
	printf '%s\n' "$$out" | grep -E '^(--- |ok )|FIGURE'

# The rolling upgrade with real processes (runner/localcluster/upgradetest,
# docs/testing.md): one cluster runs two builds of this tree, the release
# build and the one tagged upgradetest (event schema 2, one more optional
# field, its upcaster); a schedule with the raise and a rollback after it,
# one with the rollback before it, and the negative run on the builds
# tagged strictreader, which must fail. First the golden corpus replays on
# the newer build (the release build's run is in unit). Prints the figures
# (the whole output when it fails). The test process itself is a driver
# of real processes and runs without -race, as the binaries it starts do.
upgrade-test: test-bin
	@$(GO) test -count=1 -tags upgradetest -run '^TestGoldenCorpus' ./actors/workflow/ || exit 1; \
	out=$$($(GO) test -count=1 -tags upgradetest -timeout 15m -v ./runner/localcluster/upgradetest/ 2>&1); rc=$$?; \
	if [ $$rc -ne 0 ]; then printf '%s\n' "$$out"; exit $$rc; fi; \
	printf '%s\n' "$$out" | grep -E '^(--- |ok )|FIGURE'

# Real-process proofs of takeover (runner/localcluster/takeovertest): orders held
# at every step between module call and append, their owner SIGKILLed and
# taken over by the CLI, all terminal with each effect once; a SIGSTOPped
# owner taken over with force cannot write after SIGCONT; -takeover-after
# takes a killed owner's order over after the first OWNER_GONE. Prints the
# figures (the whole output when it fails).
takeover-test: test-bin
	@out=$$($(GO) test -race -count=1 -timeout 5m -v ./runner/localcluster/takeovertest/ 2>&1); rc=$$?; \
	if [ $$rc -ne 0 ]; then printf '%s\n' "$$out"; exit $$rc; fi; \
	printf '%s\n' "$$out" | grep -E '^(--- |ok )|FIGURE'

# Real-process proof of placement spread (runner/localcluster/scaletest):
# six workflow and three API processes, 1,000 orders through the APIs,
# every workflow member owns some and none more than twice its fair share;
# prints the orders per member (the whole output when it fails).
scale-test: test-bin
	@out=$$($(GO) test -race -count=1 -timeout 5m -v ./runner/localcluster/scaletest/ 2>&1); rc=$$?; \
	if [ $$rc -ne 0 ]; then printf '%s\n' "$$out"; exit $$rc; fi; \
	printf '%s\n' "$$out" | grep -E '^(--- |ok )|FIGURE'

# Real-process proof of Redis Cluster (runner/localcluster/redisclustertest):
# the local cluster on a 3-master Redis Cluster, orders through the APIs
# while slots holding live order keys move to another master; ASK/MOVED
# redirects counted on the masters, every order completed, 0 CROSSSLOT,
# keys on all three masters. Then orders held by their owner between a
# step's effect and its append (-fixtures) while their slot moves, all the
# way or half-way: the owner's own writes meet MOVED and ASK, every held
# order ends right, gapless, each effect once. Prints the figures (the
# whole output when it fails).
redis-cluster-test: test-bin
	@out=$$($(GO) test -race -count=1 -timeout 3m -v -skip '^$(CLUSTER_FAILOVER_TEST)$$' ./runner/localcluster/redisclustertest/ 2>&1); rc=$$?; \
	if [ $$rc -ne 0 ]; then printf '%s\n' "$$out"; exit $$rc; fi; \
	printf '%s\n' "$$out" | grep -E '^(--- |ok )|FIGURE'

# The deployable (scripts/deploy): runs the Dockerfile's build line and checks
# the executables are static, and decodes every manifest strictly into the
# typed Kubernetes objects and checks they fit together. Its own target with
# a long timeout: the CGO-off, k8s-tagged build recompiles client-go on a
# cold cache.
deploy-test:
	$(GO) test -count=1 -timeout 20m ./scripts/deploy/...

multi-member:
	$(GO) test -count=1 $(MULTI_MEMBER)

# Shows that the store contract suite ran against a real redis-server (the
# tests never skip; this prints the server they started, by PID).
store-evidence:
	@out=$$($(GO) test -count=1 -v -run 'TestRedisContract$$' ./eventstore/ 2>&1); \
	line=$$(printf '%s\n' "$$out" | grep -m1 -oE 'redis-server pid=[0-9]+ addr=[^ ]+'); \
	if [ -z "$$line" ]; then printf '%s\n' "$$out"; echo "store tests did not run against a redis-server"; exit 1; fi; \
	echo "store contract suite ran against a real $$line"

# Regenerates the committed contract code. Installs protoc (Debian's
# protobuf-compiler) when missing and may, and protoc-gen-go at the version
# go.mod pins for the runtime.
proto:
	@command -v protoc >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler; \
	  else echo "protoc is required: install Debian package protobuf-compiler"; exit 1; fi; }
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$$($(GO) list -m -f '{{.Version}}' google.golang.org/protobuf)
	PATH="$$PATH:$$($(GO) env GOPATH)/bin" protoc -I . --go_out=. --go_opt=module=github.com/shoppingmall-go/shoppingmall \
		actors/contracts/shoppingmall.proto actors/contracts/operations.proto cluster/placement/placement.proto

build:
	$(call build-bins,$(RUN_DIR)/bin)

# Local cluster in the background under $(RUN_DIR) (state in localcluster.json).
# WORKFLOWS and APIS set how many order-workflow and commerce-api processes
# run (workflow-a.., api-a..; default 2 and 2). CLUSTER_FLAGS may add
# -self-check, -fixtures. Admin is always on, on loopback, with the
# generated token in $(RUN_DIR)/admin.token.
CLUSTERCTL = $(GO) run ./runner/localcluster/cmd/clusterctl
WORKFLOWS ?= 2
APIS ?= 2

cluster-up: redis $(if $(ARCHIVE_FLAG),postgres)
	@$(CLUSTERCTL) up -run-dir $(RUN_DIR) -go $(GO) -workflows $(WORKFLOWS) -apis $(APIS) $(REDIS_CLUSTER_FLAG) $(REDIS_HA_FLAG) $(ARCHIVE_FLAG) $(RETENTION_FLAG) $(CLUSTER_FLAGS)

cluster-down:
	@$(CLUSTERCTL) down -run-dir $(RUN_DIR)

# Adds carts, stock and payment methods (commerce.LoadSeed JSON) to the
# running cluster's Redis.
seed:
	@if [ -z "$(SEED)" ]; then echo "usage: make seed SEED=file.json" >&2; exit 2; fi
	@$(CLUSTERCTL) seed -run-dir $(RUN_DIR) -file $(SEED)

# The smoke run end to end (docs/contract.md, "Smoke run"): prints
# shoppingmall=completed and shoppingmall-placement=completed, or fails.
smoke: redis
	GO=$(GO) bash scripts/smoke.sh -run-dir $(RUN_DIR)/smoke $(REDIS_CLUSTER_FLAG)

# Benchmarks, never part of `make test`. First the warm grain call through
# our Location Store lookup next to protoactor's disthash, and a new
# order's start with its grain's Ready commit in the start's append next
# to the commit made first (ratios printed), then the whole cluster under
# load (runner/bench; results and plot in $(RUN_DIR)/bench): a closed-loop
# peak, then an open loop at a fixed rate (half that peak) with latencies
# from each order's scheduled start.
# The last phase is the overload: 3x the peak for -overload, then half
# of it for -overload-tail (-overload 0 skips it).
# BENCH_FLAGS may add -concurrency, -duration, -orders, -open-loop-rate,
# -open-loop-duration, -open-loop=false, -overload, -overload-tail,
# -overload-generator vegeta (the overload timeline from vegeta's attacker).
# BENCH_BASELINE=<commit> builds that commit's binaries and measures
# them first, then the working tree, and prints both side by side with
# ratios ($(RUN_DIR)/bench/baseline,
# bench-compare.json); BENCH_FLAGS=-both-orders adds a reversed pass
# (working tree, then baseline) and prints the geometric mean of the two
# passes' ratios, cancelling the position effect (bench-compare-both.json).
bench: redis
	@mkdir -p $(RUN_DIR)
	@set -o pipefail; $(GO) test -run '^$$' -bench 'WarmCall|MintedStart' -benchtime 2s -count 3 ./cluster/clustertest/ | tee $(RUN_DIR)/warmcall.txt
	@awk '/WarmCall\/location/ {l+=$$3; nl++} /WarmCall\/disthash/ {d+=$$3; nd++} END { if (nl && nd) printf "warm call (mean of %d runs): location %d ns/op, disthash %d ns/op, location/disthash = %.2f\n", nl, l/nl, d/nd, (l/nl)/(d/nd); else { print "warm call: ratio unavailable"; exit 1 } }' $(RUN_DIR)/warmcall.txt
	@awk '/MintedStart\/ready-in-start/ {a+=$$3; na++} /MintedStart\/ready-committed-first/ {c+=$$3; nc++} END { if (na && nc) printf "minted start (mean of %d runs): Ready in the start %d ns/op, Ready committed first %d ns/op, in-start/first = %.2f\n", na, a/na, c/nc, (a/na)/(c/nc); else { print "minted start: ratio unavailable"; exit 1 } }' $(RUN_DIR)/warmcall.txt
	$(GO) run ./runner/bench -run-dir $(RUN_DIR)/bench $(if $(BENCH_BASELINE),-baseline $(BENCH_BASELINE)) $(REDIS_CLUSTER_FLAG) $(BENCH_FLAGS)

# Restate side by side (never part of `make test`): installs restate-server
# @restatedev/restate-server 1.7.12 from npm under $(RUN_DIR)/peers (and
# fails, saying so, when npm or its registry cannot be reached), builds the
# Restate peer (runner/peers/restate, a Go module of its own) and runs, back
# to back with the same seed, mix, load generator and phases: ours with
# Redis AOF appendfsync everysec, ours with appendfsync always, then the
# same workflow as a Restate virtual object. Table, ratios, durability and
# goals on the terminal and in $(RUN_DIR)/bench-peers/bench-peers.json.
# BENCH_PEERS_FLAGS may add -duration, -concurrency, -open-loop-duration,
# -ceiling-duration; -smoke runs a handful of orders through Restate and
# checks their statuses and effects instead.
bench-peers: redis peers-check
	@restate=$$(bash scripts/install-restate.sh $(RUN_DIR)/peers) || exit 1; \
	$(GO) run ./runner/bench -run-dir $(RUN_DIR)/bench-peers -peers -restate-server "$$restate" $(BENCH_PEERS_FLAGS)

# The Restate peer is a Go module of its own that builds against this
# checkout (a replace directive), so a change to the main module's
# requirements can leave its go.mod stale, and nothing else builds it:
# this keeps `make bench-peers` working on a fresh clone, within `make
# test`, without starting restate-server. `go mod tidy -diff` fails and
# prints the change when go.mod or go.sum needs one; vet builds it.
peers-check:
	@cd runner/peers/restate && $(GO) mod tidy -diff && $(GO) vet ./... && echo "peers-check: the Restate peer's module is tidy and builds"

# Seeded chaos soak (runner/soak): its own cluster, a mixed load through the
# public API, a fault schedule drawn from the seed, the operator's quiet
# period, then the invariant checker (runner/soak/check) over Redis and the
# client's log. Results and the history in $(RUN_DIR)/soak. SOAK_FLAGS may
# set -duration (default 2m) and -seed (default: from the clock, printed).
# The partition fault needs iptables (installed when missing, as for
# partition-test) and root; without them it is skipped and says why.
soak: redis test-bin
	@bash scripts/install-iptables.sh >/dev/null || echo "soak: no iptables: the partition fault is skipped" >&2
	$(GO) run ./runner/soak -run-dir $(RUN_DIR)/soak $(SOAK_BINS) $(REDIS_HA_FLAG) $(SOAK_FLAGS)

# scripts/deploy/compose.yaml end to end, on a dockerd of its own:
# installs Debian's docker.io and docker-compose when missing (root),
# builds the images FROM scratch, places an order and sees it Confirmed,
# takes the stack down. Not part of `make test`; SHOPPINGMALL_SKIP_COMPOSE=1
# skips it.
.PHONY: compose-test
compose-test:
	@bash scripts/compose-test.sh
