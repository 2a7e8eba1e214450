#!/usr/bin/env bash
# The README's main job: set up the environment, then train a small model built on
# ms_grad_ops.nn.DSAttention in GRAPH mode, in DeepSeek-V3.2's two stages (dense warm-up of the
# indexer, then top-k sparse training), beside a dense-attention run of the same model.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
WORK="$(mktemp -d)"
cd "$WORK"
exec "$PY" "$ROOT/scripts/dsa_demo.py" "$@"
