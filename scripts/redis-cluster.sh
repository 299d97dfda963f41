#!/usr/bin/env bash
# Starts and stops a local 3-master Redis Cluster (no replicas) for a
# process started by hand with -redis redis+cluster://...
#
#   scripts/redis-cluster.sh start [DIR]   start it, print its URL and seeds
#   scripts/redis-cluster.sh stop  [DIR]   stop its masters, by PID
#   scripts/redis-cluster.sh status [DIR]  print the URL and what runs
#
# DIR (default .run/redis-cluster) holds one directory per master
# (node-1, node-2, node-3: data, nodes.conf, redis.log, redis.pid) and the
# cluster's URL in url. The ports are free ones picked below the
# kernel's ephemeral range, each master's cluster bus on a port of its own.
# Every master is stopped by the PID it recorded, never by name. The
# tests and `make smoke REDIS_CLUSTER=1` start clusters of their own
# (runner/redisserver.StartCluster); this one is for manual runs.
set -euo pipefail
cmd=${1:-}
dir=${2:-.run/redis-cluster}
masters=3

usage() { echo "usage: $0 start|stop|status [dir]" >&2; exit 2; }

alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null; }

pid_of() { cat "$dir/node-$1/redis.pid" 2>/dev/null || true; }

# free PORT: nothing listens on 127.0.0.1:PORT.
free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pick_port() {
  local p
  for _ in $(seq 200); do
    p=$((11000 + RANDOM % 9000))
    if free "$p" && free "$((p + 10000))"; then echo "$p"; return 0; fi
  done
  echo "no free port pair found" >&2
  return 1
}

start() {
  command -v redis-server >/dev/null 2>&1 || bash "$(dirname "$0")/install-redis.sh"
  command -v redis-cli >/dev/null 2>&1 || { echo "redis-cli is required (Debian package redis-tools)" >&2; exit 1; }
  for i in $(seq "$masters"); do
    if alive "$(pid_of "$i")"; then
      echo "a cluster already runs in $dir (node-$i pid $(pid_of "$i")); stop it first" >&2
      exit 1
    fi
  done
  rm -rf "$dir"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  local seeds=() ports=() p
  for i in $(seq "$masters"); do
    p=$(pick_port)
    ports+=("$p")
    mkdir -p "$dir/node-$i"
    redis-server --daemonize yes --bind 127.0.0.1 --port "$p" --cluster-port "$((p + 10000))" \
      --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000 \
      --dir "$dir/node-$i" --pidfile "$dir/node-$i/redis.pid" --logfile "$dir/node-$i/redis.log" \
      --appendonly yes
    seeds+=("127.0.0.1:$p")
  done
  for i in $(seq "$masters"); do
    for _ in $(seq 100); do
      redis-cli -p "${ports[$((i - 1))]}" ping >/dev/null 2>&1 && break
      sleep 0.1
    done
  done
  redis-cli --cluster create "${seeds[@]}" --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1 || {
    cat "$dir/create.log" >&2; stop; exit 1; }
  for _ in $(seq 100); do
    redis-cli -p "${ports[0]}" cluster info 2>/dev/null | grep -q 'cluster_state:ok' && break
    sleep 0.1
  done
  local url="redis+cluster://${seeds[0]}"
  for s in "${seeds[@]:1}"; do url+=$([[ $url == *\?* ]] && echo "&" || echo "?")"addr=$s"; done
  echo "$url" >"$dir/url"
  status
}

stop() {
  local pid
  for i in $(seq "$masters"); do
    pid=$(pid_of "$i")
    if alive "$pid"; then
      kill -TERM "$pid"
      for _ in $(seq 100); do alive "$pid" || break; sleep 0.1; done
      alive "$pid" && kill -KILL "$pid"
      echo "stopped node-$i pid $pid"
    fi
  done
}

status() {
  [[ -f $dir/url ]] || { echo "no cluster in $dir"; return 0; }
  echo "url   $(cat "$dir/url")"
  for i in $(seq "$masters"); do
    local pid state=stopped
    pid=$(pid_of "$i")
    alive "$pid" && state=running
    echo "node-$i pid ${pid:-?} $state log $dir/node-$i/redis.log"
  done
}

case $cmd in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) usage ;;
esac
