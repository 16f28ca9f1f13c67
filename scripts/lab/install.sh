#!/bin/bash
# install.sh - install the Debian packages the Slurm lab needs (idempotent, root only).
#
# Only installs what is missing, so a re-run costs one dpkg-query per package.
# Runs `apt-get update` first only when a package is missing, and retries the
# install once after an update (a fresh machine may have stale or no lists).
set -euo pipefail

log() { echo "[lab-install $(date +%T)] $*"; }
die() { echo "[lab-install] ERROR: $*" >&2; exit 1; }

# Debian 12 package names. slurm-wlm-jwt-plugin provides auth/jwt and
# rest_auth/jwt; slurmdbd stores through slurm-wlm-mysql-plugin; job_submit/lua
# ships in slurm-wlm-basic-plugins. gcc and libslurm-dev build the SPANK
# plugin, lua5.1 runs the unit test of job_submit.lua.
PKGS=(
  munge slurm-wlm slurmctld slurmd slurm-client slurm-wlm-basic-plugins
  slurmrestd slurm-wlm-jwt-plugin
  slurmdbd slurm-wlm-mysql-plugin mariadb-server mariadb-client
  libslurm-dev gcc libc6-dev make curl
  lua5.1
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
[ "$(id -u)" -eq 0 ] || die "missing packages (${missing[*]}) and not root"

export DEBIAN_FRONTEND=noninteractive
t0=$(date +%s.%N)
APT_LOG=${TMPDIR:-/tmp}/rubick-lab-apt.log
# Postinst scripts must not start the packaged daemons: there may be no init
# system, and the lab runs its own. policy-rc.d exit 101 makes invoke-rc.d
# skip them; a policy-rc.d we created is removed again afterwards.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\n# temporary, from rubick scripts/lab/install.sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
log "installing: ${missing[*]}"
# Lock::Timeout: wait for another apt run instead of failing at once
apt_opts=(-y -q -o DPkg::Lock::Timeout=300 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold --no-install-recommends)
apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null || log "apt-get update failed, trying the install anyway"
if ! apt-get install "${apt_opts[@]}" "${missing[@]}" >"$APT_LOG" 2>&1; then
  log "install failed, retrying after apt-get update (see $APT_LOG)"
  apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null
  apt-get install "${apt_opts[@]}" "${missing[@]}" >"$APT_LOG" 2>&1 \
    || { tail -20 "$APT_LOG" >&2; die "apt-get install failed"; }
fi
log "installed in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s"
