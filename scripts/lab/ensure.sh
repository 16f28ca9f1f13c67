#!/bin/bash
# ensure.sh - install the lab's packages when missing, then start the lab
# (both idempotent). Root only. Same settings as up.sh.
set -euo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
"$here/install.sh"
exec "$here/up.sh"
