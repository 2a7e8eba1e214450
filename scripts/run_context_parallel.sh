#!/usr/bin/env bash
# Context-parallel training of the DSA demo model: 2 msrun workers on this machine (loopback only),
# each holding half of every sequence (head-tail folded), then the same training in one process on
# the whole sequences; prints both runs' per-step global losses and their largest relative
# difference. Extra arguments go to dsa_context_parallel.py (both runs), e.g. --layout TND.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
WORK="$(mktemp -d)"
cd "$WORK"
PORT="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
# msrun starts `python` from PATH for every worker: put the venv first.
export PATH="$(dirname "$PY"):$PATH" MS_WORKER_IP=127.0.0.1
echo "[context parallel] 2 workers (--cp 2) on 127.0.0.1:$PORT, logs in $WORK/msrun_log" >&2
status=0
msrun --worker_num=2 --local_worker_num=2 --master_addr=127.0.0.1 --master_port="$PORT" --join=True \
  --log_dir=msrun_log "$ROOT/scripts/dsa_context_parallel.py" --cp 2 --save cp "$@" || status=$?
grep -h "\[rank" msrun_log/worker_*.log || true
[ "$status" -eq 0 ] || exit "$status"
echo "[context parallel] the same training in one process on the whole sequences" >&2
"$PY" "$ROOT/scripts/dsa_context_parallel.py" --save one "$@" | tee one.log
"$PY" - msrun_log/worker_0.log one.log <<'PY'
import re, sys
def losses(path):
    return [tuple(map(float, m)) for m in re.findall(r"global task loss (\S+)  indexer KL (\S+)", open(path).read())]
cp, one = losses(sys.argv[1]), losses(sys.argv[2])
assert cp and len(cp) == len(one), (len(cp), len(one))
worst = max(abs(a - b) / abs(b) for x, y in zip(cp, one) for a, b in zip(x, y))
print(f"[context parallel] {len(cp)} steps: largest relative difference of the global losses (task, indexer KL), "
      f"CP=2 vs one process: {worst:.3g}")
sys.exit(0 if worst <= 1e-6 else 1)
PY
