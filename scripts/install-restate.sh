#!/usr/bin/env bash
# Installs restate-server from npm (@restatedev/restate-server; its
# native binary comes with the platform's optional dependency) under DIR
# and prints the native binary's path, so that the bench measures
# restate-server itself rather than a node wrapper. An install of the
# right version already there is reused. Exits non-zero, saying why,
# when npm is missing or the registry cannot be reached.
#
# usage: install-restate.sh DIR [VERSION]
set -euo pipefail
dir=${1:?usage: install-restate.sh DIR [VERSION]}
version=${2:-1.7.12}

find_bin() {
  { find "$dir/node_modules/@restatedev" -maxdepth 3 -path '*/restate-server-*/bin/restate-server' -type f 2>/dev/null || true; } | head -n 1
}

bin=$(find_bin)
if [ -n "$bin" ] && "$bin" --version 2>/dev/null | grep -qF "$version"; then
  echo "$bin"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "install-restate: npm not found; the Restate peer needs npm to install @restatedev/restate-server@$version (Debian: apt-get install npm)" >&2
  exit 1
fi
mkdir -p "$dir"
echo "install-restate: npm install @restatedev/restate-server@$version under $dir" >&2
if ! npm install --no-save --no-audit --no-fund --fetch-retries=1 --fetch-timeout=30000 \
    --prefix "$dir" "@restatedev/restate-server@$version" >"$dir/npm-install.log" 2>&1; then
  echo "install-restate: npm could not install @restatedev/restate-server@$version (registry unreachable?); npm said:" >&2
  tail -n 15 "$dir/npm-install.log" >&2
  exit 1
fi
bin=$(find_bin)
if [ -z "$bin" ]; then
  echo "install-restate: @restatedev/restate-server@$version installed but no native restate-server for this platform ($(uname -sm)) came with it" >&2
  exit 1
fi
if ! "$bin" --version 2>/dev/null | grep -qF "$version"; then
  echo "install-restate: $bin is not version $version" >&2
  exit 1
fi
echo "$bin"
