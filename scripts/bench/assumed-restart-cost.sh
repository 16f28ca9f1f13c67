#!/bin/bash
# assumed-restart-cost.sh - what a wrong restart cost does to rubick: the
# simulator charges the artifact's 260 s per start and placement change,
# while the policy is told another cost (rubick sim --assumed-restart-cost),
# as rubickd is told restart_cost until it has measured a model type's
# restarts. One row per assumed cost, on the Base and MT traces (8 x 8 GPUs).
# Needs bin/rubick (make build) and jq. About two seconds per row.
# Usage: scripts/bench/assumed-restart-cost.sh [COST ...] (default: the table's rows)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
RUBICK=${RUBICK:-$REPO/bin/rubick}
command -v jq > /dev/null || { echo "assumed-restart-cost.sh: needs jq" >&2; exit 1; }
[ -x "$RUBICK" ] || { echo "assumed-restart-cost.sh: $RUBICK missing: make build" >&2; exit 1; }

costs=("$@")
[ ${#costs[@]} -gt 0 ] || costs=(1s 60s 130s 260s 520s 1040s)

echo "| policy told | Base avg / P99 / makespan s | Base restarts | MT avg / guaranteed / best-effort s | MT restarts | MT SLO viol. |"
echo "|---|---|---|---|---|---|"
for c in "${costs[@]}"; do
  base=$("$RUBICK" sim --workload workload-base --policy rubick --assumed-restart-cost "$c" --json |
    jq -r '.[0] | "\(.avg_jct_s|round) / \(.p99_jct_s|round) / \(.makespan_s|round) | \(.restarts)"')
  mt=$("$RUBICK" sim --workload workload-mt --policy rubick --assumed-restart-cost "$c" --json |
    jq -r '.[0] | "\(.avg_jct_s|round) / \(.guaranteed.avg_jct_s|round) / \(.best_effort.avg_jct_s|round) | \(.restarts) | \(.slo_violations)"')
  echo "| $c | $base | $mt |"
done
