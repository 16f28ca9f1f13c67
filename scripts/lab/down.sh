#!/bin/bash
# down.sh [--purge] - stop the lab started by up.sh.
#
# Stops only the PIDs up.sh recorded, after checking that each still runs the
# expected program with this lab's SLURM_CONF (lib.sh: alive), so a reused
# PID or another lab's daemons are never signalled. Jobs are cancelled first
# so no slurmstepd outlives its slurmd. --purge also deletes $LAB (state,
# MariaDB data, logs, configuration).
set -euo pipefail

LAB=${LAB:-/tmp/rubick-lab}
export SLURM_CONF=$LAB/etc/slurm.conf
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=scripts/lab/lib.sh
. "$REPO/scripts/lab/lib.sh"
export LOG_TAG=lab-down

PURGE=0
case ${1:-} in
  --purge) PURGE=1 ;;
  "") ;;
  *) die "usage: $0 [--purge]" ;;
esac
T_START=$(now)

# stop <name> [timeout]: SIGTERM, then SIGKILL after the timeout.
stop() {
  local name=$1 secs=${2:-20} pid i
  if alive "$name"; then
    pid=$(pid_of "$name")
    kill -TERM "$pid" 2> /dev/null || true
    for ((i = 0; i < secs * 10; i++)); do
      running "$pid" || break
      sleep 0.1
    done
    if running "$pid"; then
      log "$name (pid $pid) ignored SIGTERM for ${secs}s: SIGKILL"
      kill -KILL "$pid" 2> /dev/null || true
    fi
    log "stopped $name (pid $pid)"
  fi
  rm -f "$LAB/run/$name.pid"
}

if [ -d "$LAB/run" ]; then
  if alive slurmctld; then
    # ask slurmctld to end every job; the slurmds are still up to do it
    mapfile -t jobs < <(timeout 5 squeue -h -o %i 2> /dev/null || true)
    [ ${#jobs[@]} -eq 0 ] || timeout 10 scancel --quiet "${jobs[@]}" 2> /dev/null || true
    for _ in $(seq 50); do
      [ -z "$(timeout 5 squeue -h -t RUNNING,COMPLETING,CONFIGURING -o %i 2> /dev/null)" ] && break
      sleep 0.2
    done
  fi
  # each daemon needs 2-4 s to exit, so independent ones stop in parallel;
  # munged goes last because the others use it while shutting down
  pids=()
  stop slurmrestd & pids+=($!)
  for f in "$LAB"/run/slurmd-node*.pid; do
    [ -e "$f" ] || continue
    n=${f##*/}
    stop "${n%.pid}" & pids+=($!)
  done
  wait "${pids[@]}"
  stop slurmctld
  stop slurmdbd
  stop mariadbd 60
  stop munged
  # steps whose slurmd is gone: only slurmstepd processes of this lab
  for p in $(pgrep -x slurmstepd || true); do
    if tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qxF "SLURM_CONF=$SLURM_CONF"; then
      kill -KILL "$p" 2> /dev/null && log "killed stray slurmstepd $p"
    fi
  done
fi

if [ "$PURGE" = 1 ] && [ -e "$LAB" ]; then
  # refuse to delete a directory up.sh did not create
  [ -e "$LAB/.rubick-lab" ] || die "$LAB has no .rubick-lab marker: not deleting it"
  rm -rf -- "$LAB"
  log "purged $LAB"
fi
log "done in $(since "$T_START")s"
