#!/bin/bash
# cycle-100.sh - time rubickd cycles with 100 model-typed jobs on the Slurm lab
# (issue target: one cycle, REST reads + policy + apply, <= 1 s excluding
# checkpoint waits). Submits 100 held jobs, runs `rubickd --once` three times
# (the first starts what fits, later ones are steady state) and prints each
# cycle's duration, policy time and action count. Cancels its jobs at the end.
# Needs the lab up (make lab-up) and bin/ built (make build).
set -euo pipefail
LAB=${LAB:-/tmp/rubick-lab}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=/dev/null
. "$LAB/env.sh"
work=$(mktemp -d "$LAB/cycle-XXXXXX")
cat >"$work/rubickd.yaml" <<EOF
slurmrestd: {url: $SLURMRESTD_URL, user: $SLURMRESTD_USER, token_file: $SLURMRESTD_TOKEN_FILE, rate_limit: 1000}
partitions: [gpu]
store: $work/rubick.db
listen: ""
log_level: warn
read_batch_scripts: ${READ_SCRIPTS:-true}
EOF
models=(bert gpt2 t5 roberta vit llama7)
gpus=(1 2 4 8)
ids=()
for i in $(seq 1 100); do
  m=${models[$((i % ${#models[@]}))]}
  g=${gpus[$((i % ${#gpus[@]}))]}
  ids+=("$(sbatch --parsable --model-type="$m" -p gpu -J "cyc-$i" --gres=gpu:"$g" --cpus-per-task=4 --mem=8G \
      --requeue -o /dev/null --wrap 'sleep 600')")
done
trap 'scancel "${ids[@]}" 2>/dev/null || true' EXIT
for run in 1 2 3; do
  "$REPO/bin/rubickd" --config "$work/rubickd.yaml" --once |
    python3 -c 'import json,sys
r = json.load(sys.stdin)
print("cycle %s: jobs=%d actions=%d duration=%.3fs policy=%.1fms" % (sys.argv[1], r["jobs"], len(r["actions"] or []), r["duration_ns"] / 1e9, r["policy_ns"] / 1e6))' "$run"
  sleep 3
done
