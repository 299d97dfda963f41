#!/usr/bin/env bash
# Makes sure promtool is available for the alert rules' checks (`make
# alerts-test`: promtool check rules, promtool test rules).
#
# If promtool is already on PATH, prints its version and exits 0.
# Otherwise installs the Debian package prometheus, which ships promtool,
# with apt-get, as root or through passwordless sudo. Anywhere else it
# explains what is needed and exits 1.
#
# Debian's package may start the system prometheus service where systemd
# runs; the checks never use it (promtool evaluates the rules by itself),
# so it is left alone.
set -euo pipefail

if command -v promtool >/dev/null 2>&1; then
  promtool --version 2>&1 | head -n1
  exit 0
fi

need() {
  echo "promtool is required: install Debian package prometheus (apt-get install prometheus)" >&2
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
${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y prometheus

if ! command -v promtool >/dev/null 2>&1; then
  # Debian installs it in /usr/bin; a PATH without it still needs telling.
  if [[ -x /usr/bin/promtool ]]; then
    echo "promtool installed at /usr/bin/promtool, which is not on PATH" >&2
    /usr/bin/promtool --version 2>&1 | head -n1
    exit 0
  fi
  need
fi
promtool --version 2>&1 | head -n1
