"""Peak memory per rank of one ``DSAttention`` layer's forward + backward: context parallel over
msrun (``ContextParallelDSAttention``, ``--cp`` workers on 127.0.0.1) against one process on the
whole sequence, at every ``--seq``, and the sizing formula of docs/distributed.md checked against both.

Usage (inside the venv, from any directory; a few minutes):
    python scripts/bench/context_parallel_memory.py [--seq 8192 16384] [--cp 2]

Each measurement is its own process (msrun workers for the CP runs), PyNative, float32 kernels,
BSND, B = 1: it builds the layer and its inputs, warms up on a short sequence, then resets the
kernel's high-water mark of its resident memory (``/proc/self/clear_refs`` = 5) and runs one
forward + backward (``sum(out * d_out) + indexer_loss``); peak = ``VmHWM`` minus the resident size
before the step (the memory the step added; MindSpore's pool keeps it, so it is the step's peak).
Layer sizes: DeepSeek-V3.2's latent (kv_lora_rank 512, rope 64, indexer 128-wide keys) with fewer
heads so that a 2-core machine runs it in minutes (``SIZES``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import child_env, fmt  # noqa: E402

BENCH = "context_parallel_memory"
SIZES = {"dim": 1024, "n_heads": 8, "q_lora_rank": 384, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
         "qk_rope_head_dim": 64, "v_head_dim": 128, "index_n_heads": 16, "index_head_dim": 128, "index_topk": 512}
# DeepSeek-V3.2 (671B) layer sizes, for the sizing in docs/distributed.md.
DEEPSEEK = {"dim": 7168, "n_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64, "v_head_dim": 128, "index_n_heads": 64, "index_head_dim": 128,
            "index_topk": 2048}


def model_bytes(c: dict, seq: int, cp: int, kernel_bytes: int = 4) -> dict[str, float]:
    """The sizing formula: bytes one rank holds at the peak of a layer's forward + backward.

    ``t = seq / cp`` local tokens (padding ignored). Terms:
    - activations: per local token, the float32 tensors the forward keeps for the backward and the
      backward's gradients of the same size (x2): x, qr, q (nope+rope), absorbed q, kv, latent,
      k_pe, indexer q/k/weights, attention output, values, out; plus the kernels' copies in
      ``kernel_bytes`` (query, query rope, key, key rope, indexer q/k, output: x2 with gradients)
      and the top-k indices + values (int32 + float32);
    - gathered: (cp > 1) the key side, ``W = kv_lora_rank + qk_rope_head_dim + index_head_dim``
      float32 values per token: the all-gathered buffer (seq x W), the key segments gathered from it
      (seq x (1 + 1 / (2 cp)) x W: the early chunk's prefix repeats) and their kernel-dtype slices,
      and in the backward the segments' gradient, the gathered buffer's gradient and the AllReduce
      result (on Ascend a ReduceScatter returns only seq / cp x W);
    - indexer scores: what is never materialised here: ``t x seq / 2`` float32 (the mean causal
      prefix) if a rank held one score per (query, visible key) - shown for scale, not added.
    """
    t = seq / cp
    h, d, dr, nope, v = c["n_heads"], c["kv_lora_rank"], c["qk_rope_head_dim"], c["qk_nope_head_dim"], c["v_head_dim"]
    hi, di, k = c["index_n_heads"], c["index_head_dim"], c["index_topk"]
    f32 = (c["dim"] + c["q_lora_rank"] + h * (nope + dr) + h * d + h * dr + (d + dr) + d + dr
           + hi * di + di + hi + h * d + h * v + c["dim"])
    kernel = h * d + h * dr + d + dr + hi * di + di + h * d
    activations = t * (2 * 4 * f32 + 2 * kernel_bytes * kernel + 8 * k)
    w = d + dr + di
    gathered = 0.0
    if cp > 1:
        segments = seq * (1 + 1 / (2 * cp))
        gathered = 4 * w * (seq + segments) + kernel_bytes * w * segments + 4 * w * (segments + 2 * seq)
    return {"activations": activations, "gathered": gathered, "total": activations + gathered,
            "scores_if_materialised": 4 * t * seq / 2, "gather_bytes_per_rank": 4 * w * seq * (cp - 1) / cp}


# ------------------------------------------------------------------------------------- worker

def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def worker(seq: int) -> None:
    """One rank (or the one process): prints a JSON line with its peak."""
    import mindspore as ms
    from mindspore import Tensor

    import ms_grad_ops as mgo
    from ms_grad_ops.nn import ContextParallelPlan

    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    cp, rank = 1, 0
    if "MS_ROLE" in os.environ:
        from mindspore.communication import get_group_size, get_rank, init
        init()
        cp, rank = get_group_size(), get_rank()
    ms.set_seed(0)
    attn = mgo.nn.DSAttention(**SIZES, max_seq_len=seq)
    layer = mgo.nn.ContextParallelDSAttention(attn, cp) if cp > 1 else attn
    params = layer.trainable_params()

    def step(n: int) -> None:
        rng = np.random.default_rng(n)
        x = rng.standard_normal((n, SIZES["dim"])).astype(np.float32)
        plan = ContextParallelPlan.bsnd(1, n, cp, rank)
        x = Tensor(plan.shard(x).reshape(1, -1, SIZES["dim"]))
        extra = [Tensor(a) for a in plan.inputs()] if cp > 1 else []

        def objective(x: Tensor) -> Tensor:
            out, loss = layer(x, *extra)
            return (out * out).sum() * 1e-6 + loss.sum()

        _, grads = ms.value_and_grad(objective, None, params)(x)
        [g.asnumpy() for g in grads]

    step(4 * cp)                                      # warm-up: the ops, the pool, the collectives
    before = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    import time
    start = time.time()
    step(seq)
    print(json.dumps({"rank": rank, "cp": cp, "seq": seq, "rss_before": before, "peak": _status("VmHWM") - before,
                      "seconds": time.time() - start}), flush=True)


# ------------------------------------------------------------------------------------- driver

def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rows(text: str) -> list[dict]:
    return [json.loads(line[line.index("{"):]) for line in text.splitlines() if '{"rank"' in line]


def measure(seq: int, cp: int, work: Path, timeout: float) -> list[dict]:
    env = child_env()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("MS_ROLE", None)
    me = [str(Path(__file__).resolve()), "--as-worker", "--seq", str(seq)]
    if cp == 1:
        res = subprocess.run([sys.executable, *me], capture_output=True, text=True, env=env, timeout=timeout)
        return _rows(res.stdout)
    env["MS_WORKER_IP"] = "127.0.0.1"
    logs = work / f"logs_{seq}"
    subprocess.run([str(Path(sys.executable).parent / "msrun"), f"--worker_num={cp}", f"--local_worker_num={cp}",
                    "--master_addr=127.0.0.1", f"--master_port={_free_port()}", "--join=True", f"--log_dir={logs}",
                    *me], capture_output=True, text=True, env=env, timeout=timeout, cwd=work)
    return sorted((r for p in logs.glob("worker_*.log") for r in _rows(p.read_text())), key=lambda r: r["rank"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, nargs="+", default=[8192, 16384])
    parser.add_argument("--cp", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--as-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--report-only", action="store_true", help="rewrite the Markdown from results.jsonl")
    args = parser.parse_args()
    if args.report_only:
        write_report()
        return
    if args.as_worker:
        worker(args.seq[0])
        return
    import tempfile

    from common import append_results, run_context
    ctx = run_context(BENCH)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seq in args.seq:
            for cp in (1, args.cp):                  # one at a time: the machine's cores are shared
                got = measure(seq, cp, Path(tmp), args.timeout)
                if len(got) != cp:
                    raise SystemExit(f"seq {seq}, cp {cp}: expected {cp} results, got {got}")
                model = model_bytes(SIZES, seq, cp)
                peak = max(r["peak"] for r in got)
                rows.append({"section": "Peak memory per rank", "seq": seq, "cp": cp, "local_tokens": seq // cp,
                             "peaks": [r["peak"] for r in got], "peak": peak, "model": model["total"],
                             "model_activations": model["activations"], "model_gathered": model["gathered"],
                             "ratio": peak / model["total"], "seconds": max(r["seconds"] for r in got),
                             "sizes": SIZES})
                print(json.dumps(rows[-1]), flush=True)
    append_results(ctx, rows)
    write_report()


def write_report() -> None:
    """Rewrites ``benchmarks/context_parallel_memory.md`` from the latest run in results.jsonl."""
    from common import write_markdown
    mib = 1 << 20
    columns = [("S", lambda r: str(r["seq"])), ("ranks", lambda r: str(r["cp"])),
               ("tokens per rank", lambda r: str(r["local_tokens"])),
               ("measured peak per rank (MiB)", lambda r: " / ".join(f"{p / mib:.0f}" for p in r["peaks"])),
               ("formula (MiB): activations + gathered", lambda r: f"{r['model_activations'] / mib:.0f} + "
                                                                     f"{r['model_gathered'] / mib:.0f}"),
               ("measured / formula", lambda r: fmt(r["ratio"], ".2f")),
               ("step (s)", lambda r: fmt(r["seconds"], ".1f"))]
    write_markdown(BENCH, "Context-parallel DSAttention: peak memory per rank (CPU)",
                   [("Peak memory per rank", columns)],
                   [f"Layer sizes: {SIZES}; float32 kernels, BSND, B = 1, PyNative; one forward + backward "
                    "(`sum(out * d_out) + indexer_loss`).",
                    "Peak = the process's resident high-water mark during the step minus its resident size "
                    "before it (after a warm-up step on a short sequence); CP runs are msrun workers on "
                    "127.0.0.1, one value per rank.",
                    "Formula: `model_bytes` in scripts/bench/context_parallel_memory.py (docs/distributed.md, "
                    "Context parallel).",
                    "Step times are wall times on a machine shared with other jobs (load average 11-16 during "
                    "the 2026-12-03 run): not a speed measurement."])


if __name__ == "__main__":
    main()
