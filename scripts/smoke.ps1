# Runs the ShoppingMall smoke test (docs/contract.md, "Smoke run") as one
# command: build, Redis and seed, four processes, bounded readiness,
# fixtures, the client once, server evidence. It prints
# shoppingmall=completed (from the client) and
# shoppingmall-placement=completed (from the runner) only when everything
# passed, and exits non-zero otherwise.
#
# This is a thin wrapper: the runner, its polling budget (every 100 ms, at
# most 300 looks) and every check live in Go (runner/smoke), shared with
# scripts/smoke.sh. Arguments are passed on (e.g. -run-dir DIR). The runner
# needs redis-server on PATH and a Unix-like host (it signals processes by
# PID); use PowerShell 7 (pwsh) there.
$ErrorActionPreference = 'Stop'
Set-Location (Join-Path $PSScriptRoot '..')
if (-not (Get-Command redis-server -ErrorAction SilentlyContinue)) {
    if (Get-Command bash -ErrorAction SilentlyContinue) {
        & bash scripts/install-redis.sh
        if ($LASTEXITCODE -ne 0) { exit $LASTEXITCODE }
    } else {
        Write-Error 'redis-server not found: run scripts/install-redis.sh or apt-get install redis-server'
    }
}
$go = if ($env:GO) { $env:GO } else { 'go' }
& $go run ./runner/smoke @args
exit $LASTEXITCODE
