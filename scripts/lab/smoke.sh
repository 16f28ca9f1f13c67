#!/bin/bash
# smoke.sh - quick end-to-end check of a running lab (about 2 s): every
# daemon answers, a GPU job runs, and the --model-type path tags and holds a
# job that then starts where it is told. The Go integration tests
# (test/integration) cover the same ground and more; this is the shell-only
# check for a machine without Go.
# shellcheck disable=SC2016 # job scripts in single quotes expand on the node
set -uo pipefail

LAB=${LAB:-/tmp/rubick-lab}
[ -r "$LAB/env.sh" ] || { echo "smoke: no lab at $LAB (run scripts/lab/up.sh)" >&2; exit 1; }
# shellcheck source=/dev/null
. "$LAB/env.sh"
OUT=$LAB/out
cd "$OUT" || exit 1
pass=0
fail=0
check() {
  local what=$1
  shift
  if "$@" > /dev/null 2>&1; then
    echo "PASS: $what"
    pass=$((pass + 1))
  else
    echo "FAIL: $what"
    fail=$((fail + 1))
  fi
}
# wait_state <job> <state> <seconds>
wait_state() {
  local end=$(($(date +%s) + $3))
  while [ "$(date +%s)" -lt "$end" ]; do
    [ "$(squeue -h -j "$1" -o %T 2> /dev/null)" = "$2" ] && return 0
    sleep 0.2
  done
  return 1
}
wait_gone() {
  local end=$(($(date +%s) + $2))
  while [ "$(date +%s)" -lt "$end" ]; do
    [ -z "$(squeue -h -j "$1" 2> /dev/null)" ] && return 0
    sleep 0.2
  done
  return 1
}
rest_get() {
  curl -sf -H "X-SLURM-USER-NAME: $SLURMRESTD_USER" -H "X-SLURM-USER-TOKEN: $SLURM_JWT" "$SLURMRESTD_URL$1"
}
rest_ping() { rest_get /slurm/v0.0.38/ping | grep -q '"ping"'; }

check "slurmctld answers" sh -c 'scontrol ping | grep -q UP'
check "$LAB_NODES nodes with gpu:$LAB_GPUS_PER_NODE responding" \
  test "$(sinfo -h -N -r -o '%N %G' | grep -cE "gpu:([a-z0-9]+:)?$LAB_GPUS_PER_NODE")" -ge "$LAB_NODES"
check "slurmdbd answers (sacctmgr)" sh -c 'sacctmgr -n -P show cluster format=cluster | grep -q .'
check "slurmrestd answers with the token" rest_ping
check "sbatch --help lists --model-type" sh -c 'sbatch --help | grep -q -- --model-type'

J=$(sbatch --parsable -N1 --gres=gpu:2 -o "$OUT/smoke-%j.out" --wrap 'echo CUDA=$CUDA_VISIBLE_DEVICES')
wait_gone "$J" 30
check "untagged GPU job runs and sees 2 GPUs" grep -q 'CUDA=0,1$' "$OUT/smoke-$J.out"

J=$(sbatch --parsable --model-type=gpt2 -N1 --gres=gpu:1 -o "$OUT/smoke-%j.out" \
  --wrap 'echo MT=$RUBICK_MODEL_TYPE NODES=$SLURM_JOB_NODELIST CUDA=$CUDA_VISIBLE_DEVICES')
check "--model-type job is held (priority 0)" sh -c "squeue -h -j $J -o '%T %Q' | grep -qx 'PENDING 0'"
check "--model-type job is tagged" sh -c "scontrol show job $J | grep -q 'AdminComment=rubick:v1 model=gpt2 class=best-effort'"
scontrol update JobId="$J" NumNodes=2-2 NumTasks=2 CPUsPerTask=2 MinCPUsNode=2 NumCPUs=4 Gres=gpu:4 NodeList='node[2-3]' > /dev/null
scontrol release "$J"
wait_gone "$J" 30
check "released job ran on node[2-3] with 4 GPUs and RUBICK_MODEL_TYPE" \
  grep -q 'MT=gpt2 NODES=node\[2-3\] CUDA=0,1,2,3' "$OUT/smoke-$J.out"
check "sbatch --model-type='bad name!' is refused" sh -c "! sbatch --model-type='bad name!' --wrap true"

echo "smoke: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
