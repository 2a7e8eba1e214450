#!/usr/bin/env bash
# Second example: set up the environment, then train a small network in GRAPH mode whose backward
# runs the fused rope_grad and cla_gate_backward kernels (checked against MindSpore autodiff first).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
WORK="$(mktemp -d)"
cd "$WORK"
exec "$PY" "$ROOT/examples/rope_cla_demo.py" "$@"
