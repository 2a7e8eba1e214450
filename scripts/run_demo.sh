#!/usr/bin/env bash
# The README's main job: set up the environment, then train a small network in GRAPH mode whose
# backward runs the fused rope_grad and cla_gate_backward kernels.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
WORK="$(mktemp -d)"
cd "$WORK"
exec "$PY" "$ROOT/scripts/train_demo.py" "$@"
