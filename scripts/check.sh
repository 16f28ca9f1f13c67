#!/usr/bin/env bash
# check.sh - `make check`: every test, with the parts that wait on different
# things run side by side. The 22.05 integration and end-to-end tests share
# the 22.05 lab, so they run one after the other, and most of their time is
# spent waiting on Slurm and on the emulated trainers. Beside them run
#   - the static checks and the unit tests (CPU), at the lowest CPU priority
#     and a low disk one, so that they take what the lab's daemons, rubickd
#     and the jobs leave idle and do not delay a timed step of a lab test;
#     their bounds on a fake command's run leave room for that (a 300 ms one
#     failed so once);
#   - the Slurm 24.11 tests, on their own chroot lab (debootstrap and apt on
#     a fresh machine, then mostly waiting on that lab's slurmctld).
# Each side-run's lines are prefixed with its name. A failure does not stop
# the others; the exit status is non-zero when any failed.
#
# Settings (environment): MAKE (default make); SERIAL=1 runs the targets one
# after the other, as `make vet fmt-check man-check test lab-fresh
# integration integration-2411 e2e` would.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit
MAKE=${MAKE:-make}
T0=$(date +%s)

say() { printf '[check %s +%ds] %s\n' "$(date +%T)" "$(($(date +%s) - T0))" "$*"; }

if [ "${SERIAL:-0}" = 1 ]; then
  exec "$MAKE" vet fmt-check man-check test lab-fresh integration integration-2411 e2e
fi

# side NAME CMD...: run CMD in the background, its output prefixed with NAME,
# and say when it ends; its pid is left in $! and added to sides, its exit
# status is CMD's.
side() {
  local name=$1
  shift
  say "$name: started"
  (
    "$@" 2>&1 | sed -u "s/^/[$name] /"
    rc=$?
    say "$name: ended, exit status $rc"
    exit "$rc"
  ) &
  sides+=("$!")
}

# A check stopped (Ctrl-C, a CI timeout's TERM) stops its side-runs too,
# which would otherwise go on testing on their own.
sides=()
killtree() {
  local c
  for c in $(pgrep -P "$1"); do killtree "$c"; done
  kill -TERM "$1" 2> /dev/null
}
stop() {
  local p
  for p in "${sides[@]}"; do killtree "$p"; done
  say "stopped"
  exit 130
}
trap stop INT TERM

failed=()
# finish NAME PID: wait for a side-run and record a failure (side says how
# it ended).
finish() { wait "$2" || failed+=("$1"); }

# Both labs' old state goes first: the tests assume an empty cluster.
"$MAKE" -s lab-fresh || failed+=(lab-fresh)

# The lowest best-effort disk priority, not the idle class, which could
# starve the tests' SQLite writes behind the lab's for minutes.
low=(nice -n 19)
if command -v ionice > /dev/null && ionice -c 2 -n 7 true 2> /dev/null; then low+=(ionice -c 2 -n 7); fi
side unit "${low[@]}" "$MAKE" vet fmt-check man-check test
unit_pid=$!
# The 22.05 lab's apt run has the host's package database to itself (the
# 24.11 lab installs into its chroot, the integration tests fetch promtool
# with apt).
if [ "$(id -u)" = 0 ]; then scripts/lab/ensure.sh || failed+=(lab-up); fi
side 24.11 "$MAKE" -s integration-2411
s2411_pid=$!
"$MAKE" integration || failed+=(integration)
"$MAKE" e2e || failed+=(e2e)
finish unit "$unit_pid"
finish 24.11 "$s2411_pid"

if [ ${#failed[@]} -gt 0 ]; then
  say "FAILED: ${failed[*]}"
  exit 1
fi
say "every check passed"
