#!/bin/bash
# replay-noise.sh - how far one replay's average JCT is from replays of the
# same trace with its arrivals slightly compressed or stretched: per trace
# (Base, MT) and policy, the single replay and the mean, lowest and highest
# of 14 perturbed replays, the set docs/benchmarks.md's sensitivity table
# averages (--load-scale 0.8 0.9 0.95 1 1.05 1.1 1.25, each with exact time
# limits and with --time-limit-over 3). Two variants whose perturbed ranges
# overlap cannot be told apart on one trace.
# Needs bin/rubick (make build) and jq. About a second per replay and policy.
# Usage: scripts/bench/replay-noise.sh [POLICIES [SIM FLAG ...]]
#   (default: rubick,sia,fifo; e.g. rubick --fixed-frameworks)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
RUBICK=${RUBICK:-$REPO/bin/rubick}
command -v jq > /dev/null || { echo "replay-noise.sh: needs jq" >&2; exit 1; }
[ -x "$RUBICK" ] || { echo "replay-noise.sh: $RUBICK missing: make build" >&2; exit 1; }

policies=${1:-rubick,sia,fifo}
shift || true
extra=("$@")

echo "| trace | policy | one replay s | perturbed mean s | lowest s | highest s |"
echo "|---|---|---|---|---|---|"
for w in workload-base workload-mt; do
  one=$("$RUBICK" sim --workload "$w" --policy "$policies" --json "${extra[@]}")
  all=$(for ls in 0.8 0.9 0.95 1 1.05 1.1 1.25; do for tl in 0 3; do
    "$RUBICK" sim --workload "$w" --policy "$policies" --json --load-scale "$ls" --time-limit-over "$tl" "${extra[@]}"
  done; done | jq -s 'add')
  IFS=, read -r -a pols <<< "$policies"
  for p in "${pols[@]}"; do
    single=$(jq -r --arg p "$p" '.[] | select(.policy == $p) | .avg_jct_s | round' <<< "$one")
    stats=$(jq -r --arg p "$p" '[.[] | select(.policy == $p) | .avg_jct_s] |
      "\(add / length | round) | \(min | round) | \(max | round)"' <<< "$all")
    echo "| ${w#workload-} | $p | $single | $stats |"
  done
done
