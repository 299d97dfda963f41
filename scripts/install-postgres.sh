#!/usr/bin/env bash
# Makes sure Debian's PostgreSQL server is available for the archive's
# tests and local runs (make cluster-up ARCHIVE=1).
#
# Debian keeps initdb and postgres in /usr/lib/postgresql/<version>/bin,
# off the PATH; runner/pgserver looks there. If they are there, prints the
# server's version and exits 0. Otherwise installs the Debian package
# postgresql (PostgreSQL 15 on Debian 12) with apt-get, as root or through
# passwordless sudo. Anywhere else it explains what is needed and exits 1.
#
# The package may start the system's own cluster where systemd runs; the
# tests never use it (they start private servers on free ports), so it is
# left alone.
set -euo pipefail

find_bin() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -n -r); do
    if [[ -x $d/postgres && -x $d/initdb ]]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}

if bin=$(find_bin); then
  "$bin/postgres" --version
  exit 0
fi

need() {
  echo "PostgreSQL is required: install Debian package postgresql (apt-get install postgresql)" >&2
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
${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql

bin=$(find_bin) || need
"$bin/postgres" --version
