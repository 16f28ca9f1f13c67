#!/bin/bash
# cycle-100.sh - time rubickd cycles with 100 model-typed jobs on the Slurm lab
# (issue target: one cycle, REST reads + policy + apply, <= 1 s excluding
# checkpoint waits). Submits 100 held jobs, runs `rubickd --once` three times
# (the first starts what fits, later ones are steady state) and prints each
# cycle's duration, policy time and action count. Cancels its jobs at the end.
# Needs the lab up (make lab-up) and bin/ built (make build).
# MODE=daemon runs one rubickd instead (2 s interval) for DURATION seconds
# (default 30) and prints every cycle it reports on /status: a running
# rubickd reads the limits once a minute and each script once.
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
if [ "${MODE:-once}" = daemon ]; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  sed -i "s|^listen: \"\"|listen: 127.0.0.1:$port|" "$work/rubickd.yaml"
  echo "interval: 2s" >>"$work/rubickd.yaml"
  "$REPO/bin/rubickd" --config "$work/rubickd.yaml" 2>"$work/rubickd.log" &
  daemon=$!
  trap 'kill "$daemon" 2>/dev/null || true; scancel "${ids[@]}" 2>/dev/null || true' EXIT
  end=$((SECONDS + ${DURATION:-30}))
  seen=
  while [ "$SECONDS" -lt "$end" ]; do
    sleep 0.3
    line=$(curl -sf "http://127.0.0.1:$port/status" | python3 -c 'import json,sys
r = json.load(sys.stdin)
if r.get("cycle_id"):
    print("%d jobs=%d actions=%d duration=%.3fs policy=%.1fms" % (r["cycle_id"], r["jobs"], len(r.get("actions") or []), r["duration_ns"] / 1e9, r["policy_ns"] / 1e6))' 2>/dev/null) || continue
    id=${line%% *}
    if [ -n "$line" ] && [ "$id" != "$seen" ]; then
      seen=$id
      echo "cycle $id: ${line#* }"
    fi
  done
  exit 0
fi
for run in 1 2 3; do
  "$REPO/bin/rubickd" --config "$work/rubickd.yaml" --once |
    python3 -c 'import json,sys
r = json.load(sys.stdin)
print("cycle %s: jobs=%d actions=%d duration=%.3fs policy=%.1fms" % (sys.argv[1], r["jobs"], len(r["actions"] or []), r["duration_ns"] / 1e9, r["policy_ns"] / 1e6))' "$run"
  sleep 3
done
