#!/bin/bash
# check-alerts.sh - check contrib/prometheus/rubick-alerts.yml with promtool
# (syntax) and run its unit tests (rubick-alerts.test.yml). promtool comes
# from PATH, else, as root, from Debian's prometheus package, unpacked (not
# installed) into $PROMTOOL_DIR. Without either it skips, and says so.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROMTOOL_DIR=${PROMTOOL_DIR:-/tmp/rubick-promtool}
promtool=$(command -v promtool || true)
if [ -z "$promtool" ] && [ -x "$PROMTOOL_DIR/usr/bin/promtool" ]; then
  promtool=$PROMTOOL_DIR/usr/bin/promtool
fi
if [ -z "$promtool" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  if (cd "$tmp" && { apt-get download -q prometheus >/dev/null 2>&1 ||
    { apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null && apt-get download -q prometheus >/dev/null; }; }); then
    mkdir -p "$PROMTOOL_DIR"
    dpkg-deb -x "$tmp"/prometheus_*.deb "$PROMTOOL_DIR"
    promtool=$PROMTOOL_DIR/usr/bin/promtool
  fi
fi
if [ -z "$promtool" ]; then
  echo "SKIP: alerting rules (no promtool on PATH, and Debian's prometheus package could not be unpacked here)"
  exit 0
fi
cd "$REPO/contrib/prometheus"
"$promtool" check rules rubick-alerts.yml
"$promtool" test rules rubick-alerts.test.yml
