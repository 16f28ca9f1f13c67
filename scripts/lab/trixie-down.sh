#!/bin/bash
# trixie-down.sh [--reset|--purge] - stop the Slurm 24.11 chroot lab of
# trixie-up.sh (recorded PIDs only, checked as in lib.sh) and unmount the
# chroot's /proc, /dev and /sys. --reset then deletes the lab's state (jobs,
# logs, configuration under $TRIXIE_ROOT/lab) and keeps the installed chroot;
# --purge deletes the whole chroot. Neither deletes while anything is still
# mounted inside it.
set -euo pipefail

R=${TRIXIE_ROOT:-/tmp/rubick-trixie}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LAB=$R/lab
export SLURM_CONF=/etc/slurm/slurm.conf
export LAB_ROOT=$R
# shellcheck source=scripts/lab/lib.sh
. "$REPO/scripts/lab/lib.sh"
export LOG_TAG=lab-2411-down

PURGE=0 RESET=0
case ${1:-} in
  --purge) PURGE=1 ;;
  --reset) RESET=1 ;;
  "") ;;
  *) die "usage: $0 [--reset|--purge]" ;;
esac
case $R in /?*) ;; *) die "TRIXIE_ROOT must be an absolute path: $R" ;; esac

# stop <name>: SIGTERM, SIGKILL after 20 s
stop() {
  local name=$1 pid i
  if alive "$name"; then
    pid=$(pid_of "$name")
    kill -TERM "$pid" 2> /dev/null || true
    for ((i = 0; i < 200; i++)); do
      running "$pid" || break
      sleep 0.1
    done
    running "$pid" && kill -KILL "$pid" 2> /dev/null
    log "stopped $name (pid $pid)"
  fi
  rm -f "$LAB/run/$name.pid"
}

if [ -d "$LAB/run" ]; then
  if alive slurmctld; then
    mapfile -t jobs < <(timeout 5 chroot "$R" squeue -h -o %i 2> /dev/null || true)
    [ ${#jobs[@]} -eq 0 ] || timeout 10 chroot "$R" scancel "${jobs[@]}" 2> /dev/null || true
    sleep 1
  fi
  pids=()
  stop slurmrestd & pids+=($!)
  for f in "$LAB"/run/slurmd-node*.pid; do
    [ -e "$f" ] || continue
    n=${f##*/}
    stop "${n%.pid}" & pids+=($!)
  done
  wait "${pids[@]}"
  stop slurmctld
  stop slurmdbd    # WITH_DBD=1 only; stop skips a daemon that is not running
  stop mariadbd
  stop munged
fi
for m in sys dev proc; do
  if mountpoint -q "$R/$m"; then umount "$R/$m" 2> /dev/null || umount -l "$R/$m"; fi
done

if { [ "$PURGE" = 1 ] || [ "$RESET" = 1 ]; } && [ -e "$R" ]; then
  [ -e "$R/.rubick-trixie" ] || die "$R has no .rubick-trixie marker: not deleting it"
  if awk -v r="$R/" 'index($2, r) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
    die "something is still mounted under $R: not deleting it"
  fi
fi
if [ "$RESET" = 1 ] && [ -e "$LAB" ]; then
  rm -rf --one-file-system -- "$LAB"
  log "deleted the lab state $LAB"
fi
if [ "$PURGE" = 1 ] && [ -e "$R" ]; then
  # --one-file-system: never descend into a mount that appeared meanwhile
  rm -rf --one-file-system -- "$R"
  rm -f "$R.debootstrap.log" "$R.apt.log"
  log "purged $R"
fi
log "done"
