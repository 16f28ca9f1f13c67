#!/bin/bash
# gen-man.sh - write docs/man/<command>.md from each command's own --help,
# so the pages list exactly the flags and defaults the binaries have.
# Usage: scripts/gen-man.sh [--check]   (--check: fail if a page is stale)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/" ./cmd/...
out=$(mktemp -d)
trap 'rm -rf "$bin" "$out"' EXIT

# help CMD ARGS... prints the command's help whether it goes to stdout or
# stderr, whatever its exit status.
help() { "$@" -h 2>&1 || true; }

page() { # page NAME SECTION SUMMARY -- COMMAND...
  local name=$1 section=$2 summary=$3; shift 4
  {
    printf '# %s(%s)\n\n%s\n\n```\n' "$name" "$section" "$summary"
    help "$@"
    printf '```\n'
  } >"$out/$name.md"
}

page rubick 1 "The admin and user CLI: simulate policies, fit and query the performance model, report, explain, show the queue." -- "$bin/rubick"
for sub in sim report explain queue status gpuinfo script; do
  page "rubick-$sub" 1 "\`rubick $sub\`" -- "$bin/rubick" "$sub"
done
for sub in fit validate learn best-plan; do
  page "rubick-model-$sub" 1 "\`rubick model $sub\`" -- "$bin/rubick" model "$sub"
done
for sub in stats specs prune; do
  page "rubick-store-$sub" 1 "\`rubick store $sub\`" -- "$bin/rubick" store "$sub"
done
page rubickd 8 "The rubick scheduling daemon (configuration: contrib/rubickd/rubickd.yaml)." -- "$bin/rubickd"
page rubick-srun 1 "Runs inside a batch script in place of srun and rewrites the launch line to rubick's plan." -- "$bin/rubick-srun"
page rubick-emu-trainer 1 "An emulated Megatron trainer for tests on clusters without GPUs." -- "$bin/rubick-emu-trainer"

if [ "${1:-}" = --check ]; then
  if ! diff -ru docs/man "$out" >&2; then
    echo "docs/man is stale: run scripts/gen-man.sh" >&2
    exit 1
  fi
  echo "docs/man matches every command's --help"
else
  rm -f docs/man/*.md
  pages=("$out"/*.md)
  cp "${pages[@]}" docs/man/
  echo "wrote ${#pages[@]} pages to docs/man"
fi
