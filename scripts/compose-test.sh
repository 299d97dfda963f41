#!/usr/bin/env bash
# compose-test: brings up scripts/deploy/compose.yaml (Redis, two APIs, two
# workflows, the demo seed) on a Docker engine of its own, places an order
# through it, sees it Confirmed and takes everything down again.
#
# - Docker is Debian's docker.io (20.10) and docker-compose (1.29),
#   installed with apt-get when missing. It needs root (the engine and the
#   install); elsewhere it fails, unless SHOPPINGMALL_SKIP_COMPOSE=1 skips
#   it.
# - The engine is a dockerd this script starts with its own data root,
#   exec root, pidfile and unix socket under a temporary directory, with
#   no bridge and no iptables rules: a system Docker is never touched. It
#   is stopped by the PID the script started, as is the containerd it
#   started, and nothing else.
# - Nothing is pulled: the images are built FROM scratch
#   (scripts/deploy/Dockerfile.local) from build.sh's static executables,
#   Redis from Debian's redis-server and PostgreSQL from Debian's
#   postgresql, each with the libraries ldd lists.
# - Every service runs with host networking on loopback ports
#   (compose.yaml names them); a port already taken fails the test before
#   anything starts.
#
# Prints the order id, its status and the time of each phase.
set -euo pipefail

if [[ ${SHOPPINGMALL_SKIP_COMPOSE:-} == 1 ]]; then
  echo "compose-test: skipped (SHOPPINGMALL_SKIP_COMPOSE=1)"
  exit 0
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
compose_file=scripts/deploy/compose.yaml
project=shoppingmall-compose-test
ports=(6490 5490 8181 8182 9181 9182 8191 8192 9561 9562 9563 9564 6431 6432 6433 6434)

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }
log() { printf 'compose-test: %s\n' "$*"; }
fail() { printf 'compose-test: FAIL: %s\n' "$*" >&2; exit 1; }

began=$(now)
if [[ $(id -u) -ne 0 ]]; then
  fail "needs root, to install docker.io and docker-compose and to run its own dockerd (SHOPPINGMALL_SKIP_COMPOSE=1 skips this test)"
fi

# Debian's engine and compose, when missing.
t=$(now)
missing=()
[[ -x /usr/sbin/dockerd && -x /usr/bin/docker ]] || missing+=(docker.io)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
if ((${#missing[@]})); then
  log "installing ${missing[*]} with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
bash scripts/install-redis.sh >/dev/null
bash scripts/install-postgres.sh >/dev/null
install_time=$(since "$t")
# Debian's client, the engine's own version: another docker on PATH may
# be a newer client that builds with BuildKit.
docker=/usr/bin/docker
export DOCKER_BUILDKIT=0
log "$("$docker" --version); $(docker-compose version --short 2>/dev/null | sed 's/^/docker-compose /'); $(redis-server --version | cut -d' ' -f1-3) (install step $install_time)"

for p in "${ports[@]}"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    fail "127.0.0.1:$p is in use; compose.yaml needs ports ${ports[*]}"
  fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/compose-test.XXXXXX")
dockerd_pid=
containerd_pid=
stack_up=
export DOCKER_HOST="unix://$tmp/docker.sock"
export COMPOSE_PROJECT_NAME=$project
compose() { docker-compose -f "$compose_file" "$@"; }
# Without a terminal docker-compose prints each step twice, once
# unfinished: only the finished lines, indented.
quiet() { tr -d '\r' | { grep -v -e '\.\.\. *$' || true; } | sed 's/^/  /'; }

alive() { [[ -n $1 ]] && kill -0 "$1" 2>/dev/null; }

# stop_pid PID NAME GRACE: SIGTERM, then SIGKILL after GRACE seconds.
stop_pid() {
  local pid=$1 name=$2 grace=$3 i
  alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < grace * 10; i++)); do
    alive "$pid" || { log "stopped $name pid $pid"; return 0; }
    sleep 0.1
  done
  log "$name pid $pid did not stop in ${grace}s; SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
}

cleanup() {
  local rc=$?
  set +e
  if ((rc != 0)) && [[ -f $tmp/dockerd.log ]]; then
    log "dockerd log (last 20 lines):"
    tail -n 20 "$tmp/dockerd.log" | sed 's/^/  /'
  fi
  if [[ -n $stack_up ]]; then
    if ((rc != 0)); then
      log "logs of the stack (last 30 lines each):"
      compose logs --no-color --tail 30 2>&1 | sed 's/^/  /'
    fi
    compose down -v --timeout 60 >/dev/null 2>&1
  fi
  stop_pid "$dockerd_pid" dockerd 30
  # dockerd stops the containerd it started; should it not have, this is
  # that PID and no other.
  stop_pid "$containerd_pid" containerd 10
  # Mounts dockerd left under its roots, deepest first.
  awk -v d="$tmp/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do umount -l "$m"; done
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The engine: its own roots and socket, no bridge, no iptables.
t=$(now)
/usr/sbin/dockerd --data-root "$tmp/data" --exec-root "$tmp/exec" --pidfile "$tmp/dockerd.pid" \
  --host "$DOCKER_HOST" --bridge=none --iptables=false --ip6tables=false --ip-masq=false \
  >"$tmp/dockerd.log" 2>&1 &
dockerd_pid=$!
for ((i = 0; ; i++)); do
  "$docker" version >/dev/null 2>&1 && break
  alive "$dockerd_pid" || fail "dockerd exited: $(tail -n 5 "$tmp/dockerd.log")"
  ((i < 300)) || fail "dockerd did not answer within 30s"
  sleep 0.1
done
containerd_pid=$(ps -o pid=,comm= --ppid "$dockerd_pid" | awk '$2 == "containerd" { print $1; exit }')
log "dockerd pid $dockerd_pid (containerd pid ${containerd_pid:-none}) up in $(since "$t"), $("$docker" info --format '{{.ServerVersion}}, storage {{.Driver}}')"

# The images, FROM scratch.
t=$(now)
ctx=$tmp/context
mkdir -p "$ctx/certs" "$ctx/redis/usr/local/bin" "$ctx/data"
sh scripts/deploy/build.sh "$ctx/out"
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/certs/"
else
  : >"$ctx/certs/ca-certificates.crt"
fi
redis_bin=$(command -v redis-server)
cp -L "$redis_bin" "$ctx/redis/usr/local/bin/redis-server"
# Every library ldd lists, and the program interpreter, at the path ldd
# names (symlinks resolved).
ldd "$redis_bin" | awk '/=> \// { print $3 } /^\t\// { print $1 }' | while read -r lib; do
  mkdir -p "$ctx/redis$(dirname "$lib")"
  cp -L "$lib" "$ctx/redis$lib"
done
# PostgreSQL: Debian's server binaries, its library and share folders,
# the libraries ldd lists for them and for /bin/sh (initdb runs the
# bootstrap backend through it), the UTC zone, a passwd entry for the
# image's user (initdb looks its name up) and an entrypoint that
# initializes /data once.
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
pgdir=$(dirname "$pgbin")
pgver=$(basename "$pgdir")
pg=$ctx/postgres
mkdir -p "$pg$pgbin" "$pg/usr/share/postgresql" "$pg/usr/share/zoneinfo" "$pg/etc" "$pg/bin" "$ctx/pgdata"
cp -L "$pgbin/postgres" "$pgbin/initdb" "$pg$pgbin/"
cp -rL "$pgdir/lib" "$pg$pgdir/"
cp -rL "/usr/share/postgresql/$pgver" "$pg/usr/share/postgresql/"
cp -L /usr/share/zoneinfo/UTC "$pg/usr/share/zoneinfo/UTC"
cp -L /bin/sh "$pg/bin/sh"
for exe in "$pgbin/postgres" "$pgbin/initdb" /bin/sh "$pgdir"/lib/*.so; do
  ldd "$exe" 2>/dev/null | awk '/=> \// { print $3 } /^\t\// { print $1 }'
done | sort -u | while read -r lib; do
  mkdir -p "$pg$(dirname "$lib")"
  cp -L "$lib" "$pg$lib"
done
printf 'postgres:x:65532:65532::/data:/bin/sh\n' >"$pg/etc/passwd"
printf 'postgres:x:65532:\n' >"$pg/etc/group"
cat >"$pg/entrypoint.sh" <<EOF
set -e
if [ ! -s /data/PG_VERSION ]; then
  $pgbin/initdb -D /data -U shoppingmall --auth=trust --encoding=UTF8 --locale=C >/dev/null
fi
exec $pgbin/postgres -D /data -c listen_addresses=127.0.0.1 -c port=5490 -c unix_socket_directories= "\$@"
EOF
cp scripts/deploy/Dockerfile.local "$ctx/Dockerfile"
for target in commerce-api order-workflow; do
  "$docker" build -q --target "$target" -t "shoppingmall/$target:dev" "$ctx" >/dev/null
done
"$docker" build -q --target redis -t shoppingmall/redis:local "$ctx" >/dev/null
"$docker" build -q --target postgres -t shoppingmall/postgres:local "$ctx" >/dev/null
log "images built FROM scratch in $(since "$t"):"
"$docker" images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | sort | sed 's/^/  /'

# The stack.
SHOPPINGMALL_ADMIN_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
SHOPPINGMALL_ORDER_ID_SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
export SHOPPINGMALL_ADMIN_TOKEN SHOPPINGMALL_ORDER_ID_SECRET
unset SHOPPINGMALL_REDIS_IMAGE SHOPPINGMALL_POSTGRES_IMAGE SHOPPINGMALL_ARCHIVE SHOPPINGMALL_TAG
t=$(now)
stack_up=1
compose up -d 2>&1 | quiet
seed_id=$(compose ps -q seed)
[[ -n $seed_id ]] || fail "no seed container"
seed_rc=$(timeout 120 "$docker" wait "$seed_id") || fail "the seed did not finish within 120s"
[[ $seed_rc == 0 ]] || fail "the seed exited $seed_rc: $("$docker" logs "$seed_id" 2>&1 | tail -n 5)"
log "seed: $("$docker" logs "$seed_id" 2>/dev/null | tail -n 1)"

ready() { [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$1") == 200 ]]; }
deadline=$((SECONDS + 120))
for url in http://127.0.0.1:8181/readyz http://127.0.0.1:8182/readyz http://127.0.0.1:8191/readyz http://127.0.0.1:8192/readyz; do
  until ready "$url"; do
    ((SECONDS < deadline)) || fail "$url not ready within 120s: $(curl -s --max-time 2 "$url")"
    sleep 0.2
  done
done
log "stack up and ready (2 APIs, 2 workflows, Redis, PostgreSQL) in $(since "$t")"
# Ready means each workflow opened the archive (it refuses to start
# otherwise); with its retention it runs the archiver too.
for w in workflow-a workflow-b; do
  compose logs "$w" 2>&1 | grep -q '"msg":"archiver running"' || fail "$w runs no archiver: $(compose logs "$w" 2>&1 | tail -n 5)"
done
log "both workflows archive finished orders to PostgreSQL after 168h"
compose ps 2>&1 | sed 's/^/  /'

# An order through api-a, awaited through api-b.
t=$(now)
key="compose-test-$(date +%s%N)"
body="{\"cartId\":\"cart-demo-ok\",\"shippingAddressId\":\"addr-demo-1\",\"paymentMethodId\":\"pm-demo-ok\",\"idempotencyKey\":\"$key\"}"
reply=$(curl -s --max-time 15 -w '\n%{http_code}' -X POST http://127.0.0.1:8181/orders -H 'Content-Type: application/json' -d "$body")
code=${reply##*$'\n'}
[[ $code == 201 ]] || fail "POST /orders answered $code: ${reply%$'\n'*}"
order=$(sed -nE 's/.*"orderId":"([^"]+)".*/\1/p' <<<"${reply%$'\n'*}" | head -n 1)
[[ -n $order ]] || fail "no orderId in ${reply%$'\n'*}"
log "order $order created through api-a (201)"
final=$(curl -s --max-time 30 "http://127.0.0.1:8182/orders/$order?waitFor=terminal&timeoutMs=20000")
status=$(sed -nE 's/.*"status":"([A-Za-z]+)".*/\1/p' <<<"$final" | head -n 1)
[[ $status == Confirmed ]] || fail "order $order: status ${status:-unknown}: $final"
log "order $order Confirmed (read through api-b) in $(since "$t")"

t=$(now)
compose down -v --timeout 60 2>&1 | quiet
stack_up=
log "stack down in $(since "$t")"
[[ -z $("$docker" ps -aq) ]] || fail "containers left after down: $("$docker" ps -a)"
log "ok: order $order Confirmed; total $(since "$began")"
