#!/usr/bin/env bash
# The README's main job: set up the environment, then train a small model built on
# ms_grad_ops.nn.DSAttention in GRAPH mode following DeepSeek-V3.2's recipe (dense training, indexer
# warm-up with the model frozen, top-k sparse training; a checkpoint under DeepSeek's tensor names
# between stages), beside a dense-attention run of the same model.
set -euo pipefail
# The demo works in a temporary folder of its own and removes it when it succeeds.
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
exec "$PY" "$ROOT/examples/dsa_demo.py" "$@"
