#!/usr/bin/env bash
# Makes sure redis-server is available for the store tests and local runs.
#
# If redis-server is already on PATH, prints its version and exits 0.
# Otherwise installs the Debian package redis-server with apt-get, as root
# or through passwordless sudo. Anywhere else it explains what is needed and
# exits 1. With the argument `sentinel` it also makes sure of Debian's
# redis-sentinel (the local Sentinel topology, `make cluster-up
# REDIS_HA=sentinel`), installed the same way.
#
# Debian's package may start the system redis service where systemd runs;
# the tests never use it (they start private servers on unix sockets), so
# it is left alone.
set -euo pipefail

pkgs=(redis-server)
want_sentinel=
if [[ ${1:-} == sentinel ]]; then
  want_sentinel=1
  pkgs+=(redis-sentinel)
fi

if command -v redis-server >/dev/null 2>&1 && { [[ -z $want_sentinel ]] || command -v redis-sentinel >/dev/null 2>&1; }; then
  redis-server --version
  exit 0
fi

need() {
  echo "redis-server is required: install Debian package redis-server (apt-get install redis-server)" >&2
  exit 1
}

command -v apt-get >/dev/null 2>&1 || need

if [[ ${EUID:-$(id -u)} -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  need
fi

${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update
${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y "${pkgs[@]}"

if ! command -v redis-server >/dev/null 2>&1; then
  # Debian installs it in /usr/bin; a PATH without it still needs telling.
  if [[ -x /usr/bin/redis-server ]]; then
    echo "redis-server installed at /usr/bin/redis-server, which is not on PATH" >&2
    /usr/bin/redis-server --version
    exit 0
  fi
  need
fi
redis-server --version
