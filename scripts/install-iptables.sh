#!/usr/bin/env bash
# Makes sure iptables is available for the partition test
# (runner/localcluster/partition drops loopback packets between two
# processes by their cgroup).
#
# If iptables is already on PATH, prints its version and exits 0.
# Otherwise installs the Debian package iptables with apt-get, as root or
# through passwordless sudo. Anywhere else it explains what is needed and
# exits 1.
set -euo pipefail

if command -v iptables >/dev/null 2>&1; then
  iptables --version
  exit 0
fi

need() {
  echo "iptables is required: install Debian package iptables (apt-get install iptables)" >&2
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
${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y iptables

command -v iptables >/dev/null 2>&1 || [[ -x /usr/sbin/iptables ]] || need
iptables --version 2>/dev/null || /usr/sbin/iptables --version
