#!/bin/bash
# sensitivity.sh - rubick's simulated results with one policy knob changed at
# a time from the defaults, on the Base and MT traces (8 x 8 GPUs): the
# sensitivity table of docs/benchmarks.md. Each row is
#   rubick sim --workload W --policy rubick --set KNOB=VALUE --json
# and, because one MT replay moves a lot with small changes, the mean over 14
# perturbed MT replays: --load-scale 0.8 0.9 0.95 1 1.05 1.1 1.25, each with
# exact time limits and with --time-limit-over 3.
# Needs bin/rubick (make build) and jq. About three seconds per row.
# Usage: scripts/bench/sensitivity.sh [KNOB=VALUE ...] (default: the table's rows)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
RUBICK=${RUBICK:-$REPO/bin/rubick}
command -v jq > /dev/null || { echo "sensitivity.sh: needs jq" >&2; exit 1; }
[ -x "$RUBICK" ] || { echo "sensitivity.sh: $RUBICK missing: make build" >&2; exit 1; }

rows=("$@")
if [ ${#rows[@]} -eq 0 ]; then
  rows=(defaults
    ReconfigKeep=0.85 ReconfigKeep=0.95 ReconfigKeep=0.97
    TimeWeight=0 TimeWeight=0.25 TimeWeight=0.75 TimeWeight=1
    StarvationAge=0s StarvationAge=1h StarvationAge=2h
    GuaranteedOrder=submit GuaranteedAge=0s GuaranteedAge=4h GuaranteedAge=16h
    SLOMargin=0 SLOMargin=0.05 SLOMargin=0.1
    MinGain=0.25 MinGain=1
    MinShare=0.25 MinShare=0.5
    ReclaimKeep=0 ReclaimKeep=0.25 ReclaimKeep=0.75 ReclaimKeep=1
    MaxSpread=1 MaxSpread=64
    PlanSwitchGain=0 PlanSwitchGain=0.2)
fi

echo "| setting | Base avg / P99 / makespan s | MT avg / guaranteed avg / best-effort avg s | MT SLO viol. | MT, mean of 14 perturbed: avg / guaranteed / best-effort s |"
echo "|---|---|---|---|---|"
for row in "${rows[@]}"; do
  set_args=()
  [ "$row" = defaults ] || set_args=(--set "$row")
  base=$("$RUBICK" sim --workload workload-base --policy rubick --json "${set_args[@]}" |
    jq -r '.[0] | "\(.avg_jct_s|round) / \(.p99_jct_s|round) / \(.makespan_s|round)"')
  mt=$("$RUBICK" sim --workload workload-mt --policy rubick --json "${set_args[@]}" |
    jq -r '.[0] | "\(.avg_jct_s|round) / \(.guaranteed.avg_jct_s|round) / \(.best_effort.avg_jct_s|round) | \(.slo_violations)"')
  perturbed=$(for ls in 0.8 0.9 0.95 1 1.05 1.1 1.25; do for tl in 0 3; do
    "$RUBICK" sim --workload workload-mt --policy rubick --json --load-scale "$ls" --time-limit-over "$tl" "${set_args[@]}"
  done; done | jq -rs 'map(.[0]) | length as $n |
    "\(map(.avg_jct_s) | add / $n | round) / \(map(.guaranteed.avg_jct_s) | add / $n | round) / \(map(.best_effort.avg_jct_s) | add / $n | round)"')
  label=$row
  [ "$row" = defaults ] || label="\`$row\`"
  echo "| $label | $base | $mt | $perturbed |"
done
