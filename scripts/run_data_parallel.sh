#!/usr/bin/env bash
# Data-parallel training of the DSA demo model over 2 processes on this machine, with msrun and
# MindSpore's own collectives (loopback only). Extra arguments go to dsa_data_parallel.py.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
WORK="$(mktemp -d)"
cd "$WORK"
PORT="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
# msrun starts `python` from PATH for every worker: put the venv first.
export PATH="$(dirname "$PY"):$PATH" MS_WORKER_IP=127.0.0.1
echo "[data parallel] 2 workers on 127.0.0.1:$PORT, logs in $WORK/msrun_log" >&2
status=0
msrun --worker_num=2 --local_worker_num=2 --master_addr=127.0.0.1 --master_port="$PORT" --join=True \
  --log_dir=msrun_log "$ROOT/examples/dsa_data_parallel.py" "$@" || status=$?
grep -h "\[rank" msrun_log/worker_*.log || true
exit "$status"
