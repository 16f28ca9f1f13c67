# lib.sh - shared helpers of the lab scripts (sourced, not run).
# Callers set LAB and SLURM_CONF before sourcing, and LOG_TAG after.
# shellcheck shell=bash

LOG_TAG=${LOG_TAG:-lab}

now() { date +%s.%N; }
# since <start>: seconds elapsed, one decimal
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
log() { echo "[$LOG_TAG $(date +%T)] $*"; }
die() { echo "[$LOG_TAG] ERROR: $*" >&2; exit 1; }

# pid_of <name>: the PID recorded for daemon <name>, or nothing.
pid_of() {
  local f=$LAB/run/$1.pid
  [ -s "$f" ] && tr -dc '0-9' < "$f"
}

# running <pid>: the process exists and is not a zombie. Daemons are orphans
# (setsid, parent exited), and the init process may reap them late, so
# `kill -0` alone would wait for a process that has already exited.
running() {
  local state
  # the field after "(comm)"; comm itself may contain blanks
  state=$(sed 's/.*) //' "/proc/$1/stat" 2> /dev/null | cut -d' ' -f1) || return 1
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

# alive <name>: the recorded PID still runs the daemon this lab started. A PID
# alone could have been reused, so also require the program name in argv[0],
# the node name for slurmd, and this lab's SLURM_CONF in the environment
# (every daemon inherits it from up.sh; another lab's daemons have their own).
alive() {
  local name=$1 pid prog argv0
  pid=$(pid_of "$name") || return 1
  [ -n "$pid" ] && running "$pid" || return 1
  prog=${name%%-*}
  argv0=$(tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null | head -n 1)
  [ "${argv0##*/}" = "$prog" ] || return 1
  if [ "$prog" = slurmd ]; then
    tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "-N ${name#slurmd-} " || return 1
  fi
  tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qxF "SLURM_CONF=$SLURM_CONF" || return 1
  # a chroot lab (trixie-up.sh) sets LAB_ROOT: the daemon must run inside it
  [ -z "${LAB_ROOT:-}" ] || [ "$(readlink "/proc/$pid/root")" = "$LAB_ROOT" ]
}

# start_daemon <name> <command...>: run a daemon that stays in the foreground
# in its own session (no init system here) and record its PID. Wrappers in
# <command> must exec (env, setpriv), so the PID is the daemon's own.
start_daemon() {
  local name=$1
  shift
  setsid "$@" > "$LAB/log/$name.stdout" 2>&1 < /dev/null &
  echo "$!" > "$LAB/run/$name.pid"
  log "started $name (pid $!)"
}

# wait_for <seconds> <name> <command...>: poll until <command> succeeds. Fails
# at once, with the end of the daemon's logs, when daemon <name> has died.
wait_for() {
  local secs=$1 name=$2 t0 end pid
  shift 2
  t0=$(now)
  end=$(($(date +%s) + secs))
  until "$@" > /dev/null 2>&1; do
    pid=$(pid_of "$name" 2> /dev/null || true)
    if [ -n "$pid" ] && ! running "$pid"; then
      tail -n 15 "$LAB/log/$name.stdout" "$LAB/log/$name.log" 2> /dev/null >&2 || true
      die "$name exited during start-up (logs in $LAB/log)"
    fi
    [ "$(date +%s)" -lt "$end" ] || die "timeout (${secs}s) waiting for $name (logs in $LAB/log)"
    sleep 0.1
  done
  log "$name ready after $(since "$t0")s"
}

# slurmdbd_conf <lab dir as slurmdbd sees it> <DbdPort> <StoragePort>: the
# lab's slurmdbd.conf on stdout, after its first lines (auth); both labs'
# slurmdbd run as root against a MariaDB on 127.0.0.1.
slurmdbd_conf() {
  local dir=$1 dbd_port=$2 db_port=$3
  echo "AuthAltTypes=auth/jwt"
  echo "AuthAltParameters=jwt_key=$dir/state/jwt_hs256.key"
  echo "DbdHost=localhost"
  echo "DbdAddr=127.0.0.1"
  echo "DbdPort=$dbd_port"
  echo "SlurmUser=root"
  echo "DebugLevel=info"
  echo "LogFile=$dir/log/slurmdbd.log"
  echo "PidFile=$dir/run/slurmdbd.pid"
  echo "StorageType=accounting_storage/mysql"
  echo "StorageHost=127.0.0.1"
  echo "StoragePort=$db_port"
  echo "StorageUser=slurm"
  echo "StoragePass=rubicklab"
  echo "StorageLoc=slurm_acct_db"
}

# gpu_type <node index> <nodes>: the GPU type, and feature, of node i of
# both labs: the first half a100, the rest h100.
gpu_type() {
  if [ "$1" -le $(($2 / 2)) ]; then echo a100; else echo h100; fi
}

# gres_conf <nodes> <GPUs a node> <device dir as slurmd sees it>: the labs'
# gres.conf on stdout: typed fake GPUs (gpu_type) and node-local scratch.
gres_conf() {
  local nodes=$1 gpus=$2 dev=$3 i
  echo "AutoDetect=off"
  for i in $(seq 1 "$nodes"); do
    echo "NodeName=node$i Name=gpu Type=$(gpu_type "$i" "$nodes") File=$dev/nvidia[0-$((gpus - 1))]"
    echo "NodeName=node$i Name=lscratch Count=1000"
  done
}
