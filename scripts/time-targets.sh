#!/usr/bin/env bash
# Runs make targets one after another and prints a table of where the time
# goes: per target its wall time beside the CPU time (user + system) of it
# and of every process it waited for, and CPU/wall, the cores it kept busy
# on average. A target near 2.0 on the 2-core machine is CPU-bound; one
# near 0 mostly waits. The figures of docs/testing.md come from it.
#
#   bash scripts/time-targets.sh                 # make test's targets, in its order
#   bash scripts/time-targets.sh unit lint       # some targets
#
# Each target's output goes to $LOG_DIR/<target>.log (default
# .run/time-targets); the first target that fails stops the run, with its
# log printed.
set -euo pipefail
cd "$(dirname "$0")/.."
LOG_DIR=${LOG_DIR:-.run/time-targets}
mkdir -p "$LOG_DIR"
if [ $# -eq 0 ]; then
	# make test's prerequisites, in the order it runs them.
	read -r -a targets <<<"$(sed -n 's/^test: *//p' Makefile)"
else
	targets=("$@")
fi
printf '| target | wall s | CPU s | CPU/wall |\n|---|---|---|---|\n'
total_wall=0 total_cpu=0
for t in "${targets[@]}"; do
	TIMEFORMAT='%R %U %S'
	if ! times=$({ time make -s "$t" >"$LOG_DIR/$t.log" 2>&1; } 2>&1); then
		cat "$LOG_DIR/$t.log" >&2
		echo "time-targets: make $t failed (log: $LOG_DIR/$t.log)" >&2
		exit 1
	fi
	read -r wall user sys <<<"$times"
	cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.1f", u + s }')
	ratio=$(awk -v c="$cpu" -v w="$wall" 'BEGIN { printf "%.2f", (w > 0 ? c / w : 0) }')
	printf '| %s | %.1f | %s | %s |\n' "$t" "$wall" "$cpu" "$ratio"
	total_wall=$(awk -v a="$total_wall" -v b="$wall" 'BEGIN { print a + b }')
	total_cpu=$(awk -v a="$total_cpu" -v b="$cpu" 'BEGIN { print a + b }')
done
printf '| **all** | %.1f | %.1f | %.2f |\n' "$total_wall" "$total_cpu" \
	"$(awk -v c="$total_cpu" -v w="$total_wall" 'BEGIN { printf "%.2f", (w > 0 ? c / w : 0) }')"
