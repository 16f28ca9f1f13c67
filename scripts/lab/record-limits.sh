#!/bin/bash
# record-limits.sh 22.05|24.11 - record slurmdbd's QOS and association
# listings with the limits slurm/cluster_test.go's TestLimits expects set,
# into slurm/testdata/<version>/, then lift the limits again. Runs against
# the lab of scripts/lab/up.sh (22.05) or trixie-up.sh with WITH_DBD=1
# (24.11); QOS guaranteed and user nobody are added for the recording where
# the lab lacks them, and removed after. 22.05's sacctmgr cannot lift a
# MaxTRESRunMinsPA once set (its -1 leaves the entry, and lifted in one
# command with MaxTRESRunMinsPU it takes PU's old entries instead): the
# script says so, and `make lab-fresh` then gives a lab without it.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
case ${1:-} in
  22.05)
    # shellcheck disable=SC1091
    . /tmp/rubick-lab/env.sh
    run() { "$@"; }
    api=v0.0.38
    ;;
  24.11)
    # shellcheck disable=SC1091
    . /tmp/rubick-trixie/lab/env.sh
    run() { chroot "$SLURM_CHROOT" env -u SLURM_CONF "$@"; }
    api=v0.0.41
    ;;
  *) echo "usage: $0 22.05|24.11" >&2; exit 2 ;;
esac
out=$REPO/slurm/testdata/$1
mod() { run sacctmgr -i modify "$@" >/dev/null; }

added=()
if ! run sacctmgr -nP show qos format=name | grep -qx guaranteed; then
  run sacctmgr -i add qos guaranteed >/dev/null
  added+=(qos)
fi
if ! run sacctmgr -nP show assoc format=account,user | grep -qx 'root|nobody'; then
  run sacctmgr -i add user nobody account=root >/dev/null
  added+=(user)
fi

lift() {
  mod qos normal set MaxTRESPerJob=gres/gpu=-1,node=-1,cpu=-1,mem=-1,billing=-1,fs/disk=-1 MaxWall=-1 \
    GrpTRES=gres/gpu=-1,cpu=-1,mem=-1,billing=-1,node=-1 MaxTRESPerUser=gres/gpu=-1,cpu=-1,mem=-1,billing=-1,node=-1 \
    MaxTRESPerAccount=gres/gpu=-1 MaxTRESPerNode=gres/gpu=-1,billing=-1 \
    GrpTRESRunMins=gres/gpu=-1,cpu=-1,billing=-1,mem=-1,node=-1 MaxTRESMinsPerJob=gres/gpu=-1,cpu=-1,billing=-1,mem=-1 \
    MaxTRESRunMinsPU=gres/gpu=-1,billing=-1,mem=-1 GrpJobs=-1 MaxJobsPU=-1 MaxJobsPA=-1
  mod qos normal set MaxTRESRunMinsPA=gres/gpu=-1
  mod user root set MaxTRESPerJob=gres/gpu=-1,node=-1 MaxTRESPerNode=cpu=-1 MaxWall=-1 \
    GrpTRES=gres/gpu=-1,cpu=-1,mem=-1,billing=-1,node=-1,energy=-1 GrpTRESRunMins=gres/gpu=-1,billing=-1,mem=-1 \
    MaxTRESMinsPerJob=gres/gpu=-1,node=-1 \
    GrpJobs=-1 MaxJobs=-1
  mod account root set MaxTRESPerJob=node=-1 GrpTRES=gres/gpu=-1 GrpTRESRunMins=cpu=-1 MaxJobs=-1
  mod qos guaranteed set MinTRESPerJob=gres/gpu=-1,node=-1,cpu=-1,mem=-1,billing=-1
  for a in "${added[@]}"; do
    case $a in
      qos) run sacctmgr -i delete qos guaranteed >/dev/null ;;
      user) run sacctmgr -i delete user nobody account=root >/dev/null ;;
    esac
  done
  local left
  left=$(run sacctmgr -nP show qos normal format=MaxTRESRunMinsPA)
  if [ -n "$left" ]; then
    echo "QOS normal keeps MaxTRESRunMinsPA=$left (sacctmgr does not lift it): run make lab-fresh before other tests" >&2
  fi
}
trap lift EXIT

mod qos normal set MaxTRESPerJob=gres/gpu=4,node=2,cpu=64,mem=200G,billing=50,fs/disk=1000 MaxWall=120 \
  GrpTRES=gres/gpu=12,cpu=96,mem=1T,billing=80,node=3 MaxTRESPerUser=gres/gpu=6,cpu=48,mem=400G,billing=40,node=2 \
  MaxTRESPerAccount=gres/gpu=7 MaxTRESPerNode=gres/gpu=3,billing=20 \
  GrpTRESRunMins=gres/gpu=600,cpu=6000,billing=9000,mem=3000000,node=100 \
  MaxTRESMinsPerJob=gres/gpu=240,cpu=2400,billing=3000,mem=1200000 \
  MaxTRESRunMinsPU=gres/gpu=300,billing=4000,mem=2000000 MaxTRESRunMinsPA=gres/gpu=360 \
  GrpJobs=5 MaxJobsPU=2 MaxJobsPA=3
mod user root set MaxTRESPerJob=gres/gpu=4,node=2 MaxTRESPerNode=cpu=24 MaxWall=90 \
  GrpTRES=gres/gpu=5,cpu=40,mem=300G,billing=30,node=2,energy=5 GrpTRESRunMins=gres/gpu=500,billing=5000,mem=2500000 \
  MaxTRESMinsPerJob=gres/gpu=200,node=50 GrpJobs=4 MaxJobs=3
mod account root set MaxTRESPerJob=node=2 GrpTRES=gres/gpu=9 GrpTRESRunMins=cpu=9000 MaxJobs=6
mod qos guaranteed set MinTRESPerJob=gres/gpu=2,node=1,cpu=4,mem=8G,billing=3

get() {
  curl -fsS -H "X-SLURM-USER-NAME: $SLURMRESTD_USER" -H "X-SLURM-USER-TOKEN: $(cat "$SLURMRESTD_TOKEN_FILE")" \
    "$SLURMRESTD_URL/slurmdb/$api/$1" -o "$out/db$api-$1.json"
}
get qos
get associations
echo "recorded $out/db$api-{qos,associations}.json"
