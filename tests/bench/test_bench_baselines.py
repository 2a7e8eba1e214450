"""The PyTorch baselines of the attention benchmarks (scripts/bench/torch_baseline.py) compute the
benchmarked math: their bf16 gradients against the float64 reference on small causal problems with
-1 slots among the selected keys. torch is optional (not a dependency): without it these tests are
skipped, and the benchmarks say "torch not installed". torch runs in a subprocess, as in the
benchmarks, so its oneDNN never meets MindSpore's in one process."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _paths import ROOT
from _util import quantize

from ms_grad_ops import reference as ref

# torch is not a dependency (the benchmarks time it only when it is importable), so without it there
# is no baseline to check.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")

T, N1, D, DR, K, NIDX, DIDX = 40, 4, 32, 8, 16, 4, 16
SCALE = 1.0 / np.sqrt(D + DR)
_RUN = """
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
import torch_baseline
d = dict(np.load(sys.argv[2]))
scale = float(d.pop("scale"))
if sys.argv[4] == "sparse_attention":
    args = [d[n] for n in ("q", "kv", "qr", "kr", "idx", "do")] + [scale]
elif sys.argv[4] == "indexer_loss":
    args = [d, scale]
else:
    args = [d]
np.savez(sys.argv[3], *torch_baseline.gradients(sys.argv[4], *args))
"""


def _torch_grads(tmp_path: Path, which: str, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
    np.savez(tmp_path / "in.npz", scale=SCALE, **arrays)
    subprocess.run([sys.executable, "-c", _RUN, str(ROOT / "scripts/bench"), str(tmp_path / "in.npz"),
                    str(tmp_path / "out.npz"), which], check=True, timeout=120)
    out = np.load(tmp_path / "out.npz")
    return [out[f"arr_{i}"] for i in range(len(out.files))]


def _causal_indices(rng: np.random.Generator) -> np.ndarray:
    """[T, K]: row t selects min(K - 2, t + 1) distinct visible keys, at random slots (-1 elsewhere)."""
    idx = np.full((T, K), -1, np.int32)
    for t in range(T):
        n = min(K - 2, t + 1)
        idx[t, rng.permutation(K)[:n]] = rng.permutation(t + 1)[:n]
    return idx


def _bf16(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return quantize(rng.standard_normal(shape) * 0.5, "bfloat16").astype(np.float32)


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def test_sparse_attention_baseline_gradients(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    x = {"q": _bf16(rng, T, N1, D), "kv": _bf16(rng, T, D), "qr": _bf16(rng, T, N1, DR), "kr": _bf16(rng, T, DR),
         "idx": _causal_indices(rng), "do": _bf16(rng, T, N1, D)}
    got = _torch_grads(tmp_path, "sparse_attention", x)
    kv = x["kv"][:, None]
    kw = dict(scale_value=SCALE, layout="TND", sparse_mode=3)
    out, smax, ssum = ref.sparse_flash_attention(x["q"], kv, kv, x["idx"][:, None], x["qr"], x["kr"][:, None],
                                                 [T], [T], **kw)
    dq, dk, dv, dqr, dkr = ref.sparse_flash_attention_grad(x["q"], kv, kv, x["idx"][:, None], x["do"], out, smax,
                                                           ssum, [T], [T], x["qr"], x["kr"][:, None], **kw)
    for g, want in zip(got, (dq, (dk + dv)[:, 0], dqr, dkr[:, 0])):
        assert g.shape == want.shape and _rel(g, want) < 3e-2


def test_indexer_loss_baseline_gradients(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    x = {"query": _bf16(rng, 1, T, N1, D), "key": _bf16(rng, 1, T, 1, D), "query_rope": _bf16(rng, 1, T, N1, DR),
         "key_rope": _bf16(rng, 1, T, 1, DR), "query_index": _bf16(rng, 1, T, NIDX, DIDX),
         "key_index": _bf16(rng, 1, T, 1, DIDX), "weights": _bf16(rng, 1, T, NIDX),
         "sparse_indices": _causal_indices(rng)[None, :, None]}
    mx, sm = ref.attention_softmax_stats(x["query"], x["key"], x["sparse_indices"], x["query_rope"], x["key_rope"],
                                         scale_value=SCALE)
    x["softmax_max"], x["softmax_sum"] = mx.astype(np.float32), sm.astype(np.float32)
    got = _torch_grads(tmp_path, "indexer_loss", x)
    want = ref.sparse_lightning_indexer_grad_kl_loss(
        x["query"], x["key"], x["query_index"], x["key_index"], x["weights"], x["sparse_indices"], mx, sm,
        x["query_rope"], x["key_rope"], scale_value=SCALE, return_kl_grad=True)[:3]
    for g, w in zip(got, (want[0][0], want[1][0, :, 0], want[2][0])):
        assert g.shape == w.shape and _rel(g, w) < 3e-2


def test_indexer_values_baseline_gradients(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    x = {"query_index": _bf16(rng, 1, T, NIDX, DIDX), "key_index": _bf16(rng, 1, T, 1, DIDX),
         "weights": _bf16(rng, 1, T, NIDX), "sparse_indices": _causal_indices(rng)[None, :, None],
         "d_values": rng.standard_normal((1, T, 1, K)).astype(np.float32)}
    got = _torch_grads(tmp_path, "indexer_values", x)
    want = ref.lightning_indexer_grad(x["query_index"], x["key_index"], x["weights"], x["sparse_indices"],
                                      x["d_values"])
    for g, w in zip(got, (want[0][0], want[1][0, :, 0], want[2][0])):
        assert g.shape == w.shape and _rel(g, w) < 3e-2
