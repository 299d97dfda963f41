#!/usr/bin/env bash
# Runs the ShoppingMall smoke test (docs/contract.md, "Smoke run") as one
# command: build, Redis and seed, four processes, bounded readiness,
# fixtures, the client once, server evidence. It prints
# shoppingmall=completed (from the client) and
# shoppingmall-placement=completed (from the runner) only when everything
# passed, and exits non-zero otherwise.
#
# This is a thin wrapper: the runner, its polling budget (every 100 ms, at
# most 300 looks) and every check live in Go (runner/smoke), shared with
# scripts/smoke.ps1. Arguments are passed on (e.g. -run-dir DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v redis-server >/dev/null 2>&1 || bash scripts/install-redis.sh
exec "${GO:-go}" run ./runner/smoke "$@"
