#!/usr/bin/env bash
# Context-parallel training of the DSA demo model: 2 msrun workers on this machine (loopback only),
# each holding half of every sequence (head-tail folded), then the same training in one process on
# the whole sequences; prints both runs' per-step global losses and their largest relative
# difference (exit 1 above 1e-6). Extra arguments go to dsa_context_parallel.py (both runs), e.g.
# --layout TND, --steps 40, --optimizer adam --lr 0.01. The default optimizer here is SGD with
# momentum: Adam's first updates are about lr * sign(gradient), so a gradient component that is
# zero up to rounding gets a full step whose sign depends on the summation order, and any two
# float32 runs that sum in different orders (this one's ranks, or data parallel) drift apart
# (docs/distributed.md, context parallel).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
WORK="$(mktemp -d)"
cd "$WORK"
PORT="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
# msrun starts `python` from PATH for every worker: put the venv first.
export PATH="$(dirname "$PY"):$PATH" MS_WORKER_IP=127.0.0.1
echo "[context parallel] 2 workers (--cp 2) on 127.0.0.1:$PORT, logs in $WORK/msrun_log" >&2
DEFAULTS=(--optimizer momentum --lr 0.1)
status=0
msrun --worker_num=2 --local_worker_num=2 --master_addr=127.0.0.1 --master_port="$PORT" --join=True \
  --log_dir=msrun_log "$ROOT/examples/dsa_context_parallel.py" --cp 2 --save cp "${DEFAULTS[@]}" "$@" || status=$?
grep -h "\[rank" msrun_log/worker_*.log || true
[ "$status" -eq 0 ] || exit "$status"
echo "[context parallel] the same training in one process on the whole sequences" >&2
"$PY" "$ROOT/examples/dsa_context_parallel.py" --save one "${DEFAULTS[@]}" "$@" | tee one.log
"$PY" - msrun_log/worker_0.log one.log <<'PY'
import re, sys
def losses(path):
    return [tuple(map(float, m)) for m in re.findall(r"global task loss (\S+)  indexer KL (\S+)", open(path).read())]
cp, one = losses(sys.argv[1]), losses(sys.argv[2])
assert cp and len(cp) == len(one), (len(cp), len(one))
rel = [[abs(a - b) / abs(b) for a, b in zip(x, y)] for x, y in zip(cp, one)]
worst = max(max(r) for r in rel)
print(f"[context parallel] {len(cp)} steps, CP=2 vs one process, largest relative difference of the global "
      f"task loss {max(r[0] for r in rel):.3g}, indexer KL {max(r[1] for r in rel):.3g} "
      f"(step 1, same parameters: {max(rel[0]):.3g})")
sys.exit(0 if worst <= 1e-6 else 1)
PY
