#!/usr/bin/env bash
# check.sh - `make check`: every test, with the parts that wait on different
# things run side by side. The unit tests keep the CPUs busy while the labs
# install and start (apt, debootstrap: network and disk), and the Slurm
# 24.11 tests, which mostly wait on their own chroot's slurmctld, run beside
# the 22.05 integration and end-to-end tests, which share the 22.05 lab and
# so run one after the other. Each side-run's lines are prefixed with its
# name. The first failure does not stop the others; the exit status is
# non-zero when any failed.
#
# Settings (environment): MAKE (default make), SERIAL=1 to run the targets
# one after the other, as `make vet fmt-check man-check test lab-fresh
# integration integration-2411 e2e` would.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MAKE=${MAKE:-make}
T0=$(date +%s)

say() { printf '[check %s +%ds] %s\n' "$(date +%T)" "$(($(date +%s) - T0))" "$*"; }

if [ "${SERIAL:-0}" = 1 ]; then
  exec "$MAKE" vet fmt-check man-check test lab-fresh integration integration-2411 e2e
fi

# side NAME CMD...: run CMD in the background, its output prefixed with NAME;
# its pid is left in $!.
side() {
  local name=$1
  shift
  say "$name: started"
  ( "$@" 2>&1 | sed -u "s/^/[$name] /" ) &
}

failed=()
# finish NAME PID: wait for a side-run and record its result.
finish() {
  if wait "$2"; then say "$1: passed"; else say "$1: FAILED"; failed+=("$1"); fi
}

"$MAKE" vet fmt-check man-check || failed+=(static)

# Both labs are set up while the unit tests run; the 24.11 chroot's failure
# to build is left for integration-2411 to report (it tries again, and
# skips when it cannot).
labs() {
  "$MAKE" -s lab-fresh || return 1
  [ "$(id -u)" = 0 ] || return 0
  scripts/lab/ensure.sh || return 1
  WITH_DBD=1 scripts/lab/trixie-up.sh || echo "the 24.11 chroot lab did not start; integration-2411 tries again"
  scripts/check-alerts.sh > /dev/null # fetches promtool for integration
}
side labs labs
labs_pid=$!
"$MAKE" test || failed+=(test)
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
