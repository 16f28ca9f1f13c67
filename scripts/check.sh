#!/usr/bin/env bash
# check.sh - `make check`: every test, with the parts that wait on different
# things run side by side. The static checks and unit tests (CPU) run while
# both labs install and start (apt, debootstrap: network and disk). The
# 22.05 integration and end-to-end tests share the 22.05 lab, so they run
# one after the other, mostly waiting on Slurm and the emulated trainers;
# the Slurm 24.11 tests, which mostly wait on their own chroot lab, run
# beside them. The unit tests do not run beside the lab tests: some bound a
# fake command's run to a fraction of a second, and starved of CPU (as a
# niced run beside a lab test's build was) they fail.
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

# Both labs' old state goes first: the tests assume an empty cluster. The
# 24.11 chroot's failure to build is left for integration-2411 to report
# (it tries again, and skips when it cannot).
"$MAKE" -s lab-fresh || failed+=(lab-fresh)
labs() {
  [ "$(id -u)" = 0 ] || return 0
  scripts/lab/ensure.sh || return 1
  WITH_DBD=1 scripts/lab/trixie-up.sh || echo "the 24.11 chroot lab did not start; integration-2411 tries again"
  scripts/check-alerts.sh > /dev/null # fetches promtool for integration
}
side labs labs
labs_pid=$!
"$MAKE" vet fmt-check man-check test || failed+=(unit)
finish labs "$labs_pid"

side 24.11 "$MAKE" -s integration-2411
s2411_pid=$!
"$MAKE" integration || failed+=(integration)
"$MAKE" e2e || failed+=(e2e)
finish 24.11 "$s2411_pid"

if [ ${#failed[@]} -gt 0 ]; then
  say "FAILED: ${failed[*]}"
  exit 1
fi
say "every check passed"
