#!/usr/bin/env bash
# The README's test command: set up the environment, lint, then run the whole suite from a
# temporary directory (GRAPH-mode failures write rank_0/ files into the working directory).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
"$PY" -m ruff check "$ROOT"
WORK="$(mktemp -d)"
cd "$WORK"
exec "$PY" -m pytest "$ROOT/tests" -q -p no:cacheprovider "$@"
