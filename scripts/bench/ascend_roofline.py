"""Cost on paper: the Ascend C kernels' work counted on the CPU twin, scaled to DeepSeek-V3.2 sizes
and set against the published peaks of Atlas A2 (910B) and Ascend 950 (a roofline).

Usage (from any directory; about 3 minutes on 2 cores):
    python scripts/bench/ascend_roofline.py [--kernels NAME ...] [--no-record]

ESTIMATES, NOT DEVICE MEASUREMENTS: no Ascend device exists where this package is developed. The twin
(ascendc/twin/) counts what each kernel asks of the hardware, per launch and core (twin_context.h
``Counter``): cube multiply-adds (M * N * K per Matmul), vector elements (per vector API call: the
elements it processes), GM bytes read and written (DataCopy(Pad), each Matmul operand read once and
its result written once, scalar GetValue / SetValue) and scalar GM accesses. A roofline turns them
into lower bounds of the time: it assumes perfect overlap of the units, perfect balance over the
cores, every GM byte from HBM (no L2 hits; the Matmul's own re-reads of an operand not counted) and
peak rates; a real kernel is slower.

Method (the twin is far too slow at full size): each kernel is counted on the twin at small sizes
with the full head dimensions (N1, D + Dr, Nidx, Didx as DeepSeek-V3.2's) and reduced sequence
lengths. Each counter is modelled as a linear combination of the kernel's work units (``units``:
selected or visible (query, key) pairs, query rows, key chunks, the key pass's index scan, ...),
computed from the shape; the coefficients are fitted by least squares on the fit sizes and the
model is checked on a held-out size (the relative error printed per counter), then evaluated at
the full size. The cube MACs of the two grads whose recompute is asked about are also given by
closed formulas (``recompute``): their totals must equal the twin's counts exactly at every
counted size, which validates the split into first computation and recomputation.

Peaks (cube: fp16/bf16 dense; HBM: total bandwidth). Sources:
  * cube rate: CANN's open platform files (github.com/hicann/runtime, src/platform/platform_config:
    cann/Ascend910B1.ini, cann-dev/Ascend950PR_9599.ini, cann-dev/Ascend950DT_9591.ini): cube cores x
    cube_m x cube_n x cube_k (16 x 16 x 16 fp16 MACs per cycle) x cube_freq. Huawei has published
    no fp16/bf16 figure for the 950 (only FP8 / MXFP8 / HiF8 1 PFLOPS and MXFP4 2 PFLOPS, Huawei
    Connect 2025, 18 Sept 2025); the .ini rate (531 TFLOPS fp16) is half that FP8 figure.
  * HBM: Ascend 950PR 1.6 TB/s (HiBL 1.0), 950DT 4.0 TB/s (HiZQ 2.0) as Huawei announced them at
    Huawei Connect 2025. Atlas A2 (910B): Huawei publishes no chip bandwidth; ASSUMED 1.6 TB/s (the
    figure third-party reports give for the 910B's HBM2e; the platform file's per-core DDR rate,
    32 bytes per cycle x 24 cores x 1.85 GHz, gives 1.42 TB/s).
  * vector and scalar ceilings, ASSUMED (no public figure): one 256-byte float32 repeat (64
    elements) per cycle per AIV at the cube clock; one scalar GM access per cycle per AIV (a cache
    hit; a miss costs hundreds of cycles), so the scalar ceiling is optimistic.

Results: benchmarks/ascend_roofline.md (rewritten) and benchmarks/results.jsonl (appended).
Adding a kernel (e.g. the V4 sparse_flash_mla family once merged) is one ``Kernel`` entry in
``KERNELS``: its run function, work units, sizes and, if it recomputes, the recompute formula.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "ascend"))

from ascendc_harness import twin_cla_gate, twin_dense_indexer, twin_indexer, twin_rope, twin_sfa  # noqa: E402
from ascendc_harness import twin_counters as tc  # noqa: E402
from ascendc_harness import twin_lib as twin  # noqa: E402
from common import append_results, cpu_info, git_commit  # noqa: E402

BENCH = "ascend_roofline"
DTYPE = "bfloat16"
CORES = 8  # AI cores of the twin launches (counts do not depend on it: tests/ascend/test_ascendc_twin_counters.py)


# ---------------------------------------------------------------------------------------- the SoCs
@dataclass(frozen=True)
class Soc:
    name: str
    cube_tflops: float   # fp16 / bf16 dense, 2 FLOPs per MAC
    hbm_tbs: float       # TB/s
    l2_tbs: float        # TB/s, all cores together
    aiv: int             # vector cores
    ghz: float           # cube / vector clock
    source: str

    @property
    def vector_elems_per_s(self) -> float:
        return self.aiv * 64 * self.ghz * 1e9

    @property
    def scalar_per_s(self) -> float:
        return self.aiv * self.ghz * 1e9


def _cube_tflops(cores: int, ghz: float) -> float:
    return cores * 16 * 16 * 16 * 2 * ghz * 1e9 / 1e12


SOCS = (
    Soc("A2 910B1", _cube_tflops(24, 1.85), 1.6, 24 * 110 * 1.85e9 / 1e12, 48, 1.85,
        "cube and L2: Ascend910B1.ini (24 cubes x 4096 MAC x 1.85 GHz; l2_rate 110 B/cycle/core); "
        "HBM: ASSUMED 1.6 TB/s (no Huawei figure)"),
    Soc("950PR", _cube_tflops(36, 1.8), 1.6, 36 * 100 * 1.8e9 / 1e12, 72, 1.8,
        "cube and L2: Ascend950PR_9599.ini (36 x 4096 x 1.8 GHz; l2_rate 100); "
        "HBM 1.6 TB/s HiBL 1.0 (Huawei Connect 2025)"),
    Soc("950DT", _cube_tflops(36, 1.8), 4.0, 36 * 100 * 1.8e9 / 1e12, 72, 1.8,
        "cube and L2: Ascend950DT_9591.ini (36 x 4096 x 1.8 GHz; l2_rate 100); "
        "HBM 4.0 TB/s HiZQ 2.0 (Huawei Connect 2025)"),
)

# ------------------------------------------------------------------------------------ the problems
# Every size: B = 1, BSND, S1 query / S2 key tokens, K selected slots (the sparse kernels select
# min(K, visible) distinct visible keys per token, -1 in the other slots), sparse_mode 3 (causal,
# S1 = S2) or 0 (every key visible).
N1, D, DR, NIDX, DIDX = 128, 512, 64, 64, 128
FULL = {"s1": 4096, "s2": 4096, "k": 2048, "mode": 3}


def visible(size: dict) -> np.ndarray:
    """Visible keys per query token: causal right-down aligned, or all S2."""
    s1, s2 = size["s1"], size["s2"]
    if size["mode"] == 3:
        return np.clip(np.arange(s1) + s2 - s1 + 1, 0, s2)
    return np.full(s1, s2)


def selected(size: dict) -> np.ndarray:
    return np.minimum(visible(size), size["k"])


def _bits(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return twin.from_bits(twin.to_bits(rng.standard_normal(shape) * scale, DTYPE), DTYPE)


def _indices(rng: np.random.Generator, size: dict) -> np.ndarray:
    k = size["k"]
    out = np.full((1, size["s1"], 1, k), -1, np.int32)
    for t, (vis, sel) in enumerate(zip(visible(size), selected(size), strict=True)):
        out[0, t, 0, :sel] = rng.permutation(int(vis))[:sel]
    return out


def _stats(size: dict, heads: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((1, 1, size["s1"], heads)), np.full((1, 1, size["s1"], heads), float(size["s2"]))


def _sfa_problem(size: dict, sinks: bool = False) -> twin_sfa.SfaProblem:
    rng = np.random.default_rng(size["s1"] + size["k"])
    s1, s2 = size["s1"], size["s2"]
    return twin_sfa.SfaProblem(
        DTYPE, _bits(rng, 1, s1, N1, D), _bits(rng, 1, s2, 1, D), None, _indices(rng, size),
        _bits(rng, 1, s1, N1, DR), _bits(rng, 1, s2, 1, DR), None, None,
        {"scale_value": 1 / math.sqrt(D + DR), "layout": "BSND", "sparse_mode": size["mode"]},
        sinks=np.linspace(-1.0, 1.0, N1) if sinks else None)


def run_sfa(size: dict) -> None:
    twin_sfa.sparse_flash_attention(_sfa_problem(size), CORES)


def run_sfa_grad(size: dict, sinks: bool = False) -> None:
    p = _sfa_problem(size, sinks)
    rng = np.random.default_rng(1)
    smax, ssum = _stats(size, N1)
    twin_sfa.sparse_flash_attention_grad(p, _bits(rng, *p.query.shape), _bits(rng, *p.query.shape), smax, ssum, CORES)


def _indexer_arrays(size: dict, main: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(size["s1"] * 7 + size["k"])
    s1, s2 = size["s1"], size["s2"]
    a = {"query_index": _bits(rng, 1, s1, NIDX, DIDX, scale=0.5), "key_index": _bits(rng, 1, s2, 1, DIDX),
         "weights": rng.standard_normal((1, s1, NIDX)).astype(np.float32).astype(np.float64) / 8}
    if main:
        a |= {"query": _bits(rng, 1, s1, N1, D), "key": _bits(rng, 1, s2, 1, D),
              "query_rope": _bits(rng, 1, s1, N1, DR), "key_rope": _bits(rng, 1, s2, 1, DR)}
        a["softmax_max"], a["softmax_sum"] = _stats(size, N1)
    return a


def run_sli(size: dict) -> None:
    a = _indexer_arrays(size, True) | {"sparse_indices": _indices(np.random.default_rng(2), size)}
    p = twin_indexer.SliProblem(DTYPE, "float32", a, None, None,
                                {"scale_value": 1 / math.sqrt(D + DR), "layout": "BSND", "sparse_mode": size["mode"]})
    twin_indexer.sparse_lightning_indexer_grad_kl_loss(p, CORES)


def run_li(size: dict) -> None:
    a = _indexer_arrays(size, False)
    p = twin_indexer.LiProblem(DTYPE, "float32", a["query_index"], a["key_index"], a["weights"], None, None,
                               {"layout": "BSND", "sparse_count": size["k"], "sparse_mode": size["mode"]})
    twin_indexer.lightning_indexer(p, CORES)


def run_lig(size: dict) -> None:
    a = _indexer_arrays(size, False)
    idx = _indices(np.random.default_rng(3), size)
    dv = np.random.default_rng(4).standard_normal(idx.shape).astype(np.float32).astype(np.float64)
    p = twin_indexer.LigProblem(DTYPE, "float32", a["query_index"], a["key_index"], a["weights"], idx, dv, None, None,
                                {"layout": "BSND", "sparse_mode": size["mode"]})
    twin_indexer.lightning_indexer_grad(p, CORES)


def run_dli(size: dict) -> None:
    a = _indexer_arrays(size, False)
    p = twin_dense_indexer.DliProblem(DTYPE, "float32", a["query_index"], a["key_index"], a["weights"], None, None,
                                      {"layout": "BSND", "sparse_mode": 3})
    twin_dense_indexer.dense_lightning_indexer_softmax_lse(p, CORES)


def run_dlig(size: dict) -> None:
    a = _indexer_arrays(size, True)
    a["softmax_max_index"], a["softmax_sum_index"] = np.zeros((1, 1, size["s1"])), np.ones((1, 1, size["s1"]))
    p = twin_dense_indexer.DligProblem(DTYPE, "float32", a, None, None,
                                       {"scale_value": 1 / math.sqrt(D + DR), "layout": "BSND", "sparse_mode": 3})
    twin_dense_indexer.dense_lightning_indexer_grad_kl_loss(p, CORES)


def _vector_inputs(size: dict, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(size["t"])
    return [_bits(rng, *shape) for shape in n * [(size["t"], size["n"], size["d"])]] + \
        [_bits(rng, size["t"], size["n"]) for _ in range(2)]


def run_cla_merge(size: dict) -> None:
    twin_cla_gate.cla_gate_merge(DTYPE, *_vector_inputs(size, 2), core_num=CORES)


def run_cla_backward(size: dict) -> None:
    twin_cla_gate.cla_gate_backward(DTYPE, *_vector_inputs(size, 3), core_num=CORES)


def _rope(size: dict, variant: str) -> None:
    rng = np.random.default_rng(size["t"])
    t, hidden = size["t"], size["n"] * size["d"]
    angles = rng.uniform(0, 2 * np.pi, (t, 128))
    cos, sin = (twin.from_bits(twin.to_bits(f(angles), DTYPE), DTYPE) for f in (np.cos, np.sin))
    twin_rope.rope_family(variant, DTYPE, _bits(rng, t, hidden), _bits(rng, t, hidden), cos, sin, np.array([t]),
                          core_num=CORES)


# ------------------------------------------------------------------------------------ work units
def _chunks(size: dict, chunk: int, per_token: np.ndarray | None = None) -> float:
    v = selected(size) if per_token is None else per_token
    return float(np.ceil(v / chunk).sum())


def _key_blocks_seen(size: dict, block: int) -> float:
    """Key-pass (key, query token) pairs of the dense grad: per block of `block` keys, its keys
    times the query tokens that see a key of it (causal: from the block's first key on)."""
    s1, s2 = size["s1"], size["s2"]
    total = 0
    for k0 in range(0, s2, block):
        nb = min(block, s2 - k0)
        first = max(0, k0 + s1 - s2)
        total += nb * (s1 - first)
    return float(total)


def units_sparse(chunk: int, scan_block: int) -> Callable[[dict], dict[str, float]]:
    """Selected pairs, query tokens, index slots (S1 x K: every slot is read, -1 or not), key
    chunks per token and the key pass's index scan (key blocks x S1 x K scalar index reads)."""
    return lambda s: {"pairs": float(selected(s).sum()), "tokens": float(s["s1"]), "slots": float(s["s1"] * s["k"]),
                      "chunks": _chunks(s, chunk), "scan": math.ceil(s["s2"] / scan_block) * s["s1"] * s["k"]}


def units_dense(chunk: int, block: int = 0, slots: bool = False) -> Callable[[dict], dict[str, float]]:
    """Visible pairs, query tokens, key chunks per token (of visible keys); with ``block`` the
    dense grad's key-pass pairs, with ``slots`` the S1 x K output slots (lightning_indexer)."""
    def units(s: dict) -> dict[str, float]:
        u = {"pairs": float(visible(s).sum()), "tokens": float(s["s1"]), "chunks": _chunks(s, chunk, visible(s))}
        if block:
            u["key_pairs"] = _key_blocks_seen(s, block)
        if slots:
            u["slots"] = float(s["s1"] * s["k"])
        return u
    return units


def units_vector(s: dict) -> dict[str, float]:
    """Elements, (token, head) rows (the gates) and tokens (rope's cos / sin rows)."""
    return {"elements": float(s["t"] * s["n"] * s["d"]), "rows": float(s["t"] * s["n"]), "tokens": float(s["t"])}


# ------------------------------------------------------------------------------ recompute formulas
def sfa_grad_macs(s: dict) -> tuple[float, float]:
    """(total, recomputed) cube MACs of sparse_flash_attention_grad: per selected pair and head the
    row pass computes S (D + Dr), dP (D), dQ (D + Dr); the key pass recomputes S and dP and adds dK
    (D + Dr) and dV (D)."""
    p = float(selected(s).sum()) * N1
    dk = D + DR
    return p * (2 * dk + D + 2 * dk + 2 * D), p * (dk + D)


def dlig_macs(s: dict) -> tuple[float, float]:
    """(total, recomputed) of dense_lightning_indexer_grad_kl_loss: per visible pair the row pass
    computes S (N1 x (D + Dr)), Sx (Nidx x Didx) and d_query_index (Nidx x Didx); per key-pass pair
    (a key of a 16-key block and a token seeing the block) S and Sx again and d_key_index."""
    main, idx = N1 * (D + DR), NIDX * DIDX
    rows, keys = float(visible(s).sum()), _key_blocks_seen(s, 16)
    return rows * (main + 2 * idx) + keys * (main + 2 * idx), keys * (main + idx)


# ---------------------------------------------------------------------------------- the kernel table
@dataclass(frozen=True)
class Kernel:
    name: str
    run: Callable[[dict], None]
    units: Callable[[dict], dict[str, float]]
    fit: tuple[dict, ...]        # reduced sizes the model is fitted on
    check: dict                  # held-out reduced size
    full: dict                   # the size of the table
    recompute: Callable[[dict], tuple[float, float]] | None = None
    note: str = ""
    extra: dict = field(default_factory=dict)


def _c(s: int, k: int) -> dict:
    return {"s1": s, "s2": s, "k": k, "mode": 3}


def _o(s1: int, s2: int, k: int) -> dict:
    return {"s1": s1, "s2": s2, "k": k, "mode": 0}


# Fit sizes: causal ones of different S and K, plus non-causal few-token ones with K beyond a
# key chunk (so chunks and tokens are not collinear).
SPARSE_FIT = (_c(32, 16), _c(48, 40), _c(64, 24), _c(80, 64), _o(2, 700, 640), _o(3, 600, 520))
SPARSE_CHECK = _c(96, 48)
# 300 tokens: two 256-key chunks for the last ones (dense_lightning_indexer_grad_kl_loss); 24, 40, 100
# not multiples of the 16-key block, so its key-pass pairs are not tokens and pairs combined.
DENSE_FIT = (_c(24, 0), _c(40, 0), _c(64, 0), _c(100, 0), _c(300, 0))
DENSE_CHECK = _c(96, 0)
VECTOR_FIT = ({"t": 16, "n": 2, "d": 128}, {"t": 40, "n": 3, "d": 128}, {"t": 24, "n": 8, "d": 256},
              {"t": 64, "n": 1, "d": 256})
VECTOR_CHECK = {"t": 33, "n": 5, "d": 256}
VECTOR_FULL = {"t": 4096, "n": 128, "d": 128}

KERNELS = (
    Kernel("sparse_flash_attention", run_sfa, units_sparse(512, 1), SPARSE_FIT, SPARSE_CHECK, FULL),
    Kernel("sparse_flash_attention_grad", run_sfa_grad, units_sparse(512, 1), SPARSE_FIT, SPARSE_CHECK, FULL,
           sfa_grad_macs),
    Kernel("sparse_lightning_indexer_grad_kl_loss", run_sli, units_sparse(512, 16), SPARSE_FIT, SPARSE_CHECK, FULL),
    Kernel("lightning_indexer", run_li, units_dense(512, slots=True), SPARSE_FIT, SPARSE_CHECK, FULL,
           note="its top-k merge runs on the scalar unit over UB, which the counters do not see"),
    Kernel("lightning_indexer_grad", run_lig, units_sparse(512, 16), SPARSE_FIT, SPARSE_CHECK, FULL),
    Kernel("dense_lightning_indexer_softmax_lse", run_dli, units_dense(512), (*DENSE_FIT, _c(600, 0)), DENSE_CHECK,
           FULL),
    Kernel("dense_lightning_indexer_grad_kl_loss", run_dlig, units_dense(256, 16), DENSE_FIT, DENSE_CHECK, FULL,
           dlig_macs),
    Kernel("cla_gate_merge", run_cla_merge, units_vector, VECTOR_FIT, VECTOR_CHECK, VECTOR_FULL),
    Kernel("cla_gate_backward", run_cla_backward, units_vector, VECTOR_FIT, VECTOR_CHECK, VECTOR_FULL),
    Kernel("rope", lambda s: _rope(s, "rope"), units_vector, VECTOR_FIT, VECTOR_CHECK, VECTOR_FULL),
    Kernel("rope_grad", lambda s: _rope(s, "atb"), units_vector, VECTOR_FIT, VECTOR_CHECK, VECTOR_FULL),
)

COUNTERS = ("macs", "gm_read_bytes", "gm_write_bytes", "gm_workspace_read_bytes", "gm_workspace_write_bytes",
            "vector_elems", "gm_scalar_accesses")


def count(kernel: Kernel, size: dict) -> dict[str, float]:
    kernel.run(size)
    t = tc.last_counters().totals()
    return {"macs": t["cube_macs_f16"] + t["cube_macs_bf16"], **{c: t[c] for c in COUNTERS[1:]}}


def fit_and_scale(kernel: Kernel) -> dict[str, object]:
    """Counts at the fit and check sizes, the fitted model per counter, its error at the check
    size and its value at the full size."""
    sizes = [*kernel.fit, kernel.check]
    counted = [count(kernel, s) for s in sizes]
    names = list(kernel.units(kernel.full))
    u = np.array([[kernel.units(s)[n] for n in names] for s in sizes])
    full_u = np.array([kernel.units(kernel.full)[n] for n in names])
    # The prediction is unique only for unit vectors in the span of the fit sizes' (units may be
    # collinear, e.g. the dense grad's key-pass pairs = pairs + 7.5 tokens at every causal S1 = S2).
    for target in (u[-1], full_u):
        w, *_ = np.linalg.lstsq(u[:-1].T, target, rcond=None)
        if np.abs(u[:-1].T @ w - target).max() > 1e-9 * np.abs(target).max():
            raise ValueError(f"{kernel.name}: the work units {names} of a size are outside the span of the fit "
                             "sizes' (collinear there): add a fit size that separates them")
    out: dict[str, object] = {"units": names, "check_error": {}, "full": {}}
    for c in COUNTERS:
        y = np.array([cnt[c] for cnt in counted], float)
        coef, *_ = np.linalg.lstsq(u[:-1], y[:-1], rcond=None)
        pred = float(u[-1] @ coef)
        out["check_error"][c] = 0.0 if y[-1] == pred else abs(pred - y[-1]) / max(abs(y[-1]), 1.0)
        out["full"][c] = max(0.0, float(full_u @ coef))
    if kernel.recompute is not None:
        exact = all(kernel.recompute(s)[0] == cnt["macs"] for s, cnt in zip(sizes, counted, strict=True))
        total, again = kernel.recompute(kernel.full)
        out["recompute"] = {"formula_equals_twin": exact, "total_macs": total, "recomputed_macs": again,
                            "share": again / total}
        out["full"]["macs"] = total if exact else out["full"]["macs"]
    return out


def bounds(full: dict[str, float], soc: Soc) -> dict[str, float]:
    """Seconds each ceiling allows at least: the cube; HBM for the input and output bytes (the
    per-core workspaces, reused chunk after chunk, assumed to stay in L2); L2 for every GM byte;
    the vector and scalar units. ``hbm_all``: HBM if the workspace bytes went to HBM too (not
    part of the bound)."""
    gm = full["gm_read_bytes"] + full["gm_write_bytes"]
    ws = full["gm_workspace_read_bytes"] + full["gm_workspace_write_bytes"]
    return {"cube": 2 * full["macs"] / (soc.cube_tflops * 1e12), "hbm": (gm - ws) / (soc.hbm_tbs * 1e12),
            "l2": gm / (soc.l2_tbs * 1e12),
            "vector": full["vector_elems"] / soc.vector_elems_per_s,
            "scalar": full["gm_scalar_accesses"] / soc.scalar_per_s, "hbm_all": gm / (soc.hbm_tbs * 1e12)}

CEILINGS = ("cube", "hbm", "l2", "vector", "scalar")


def d_sinks_cost() -> dict[str, float]:
    """The SFA grad's d_sinks reduction on AIV 0: the work sinks add to AIV 0 beyond the other
    AIVs, per (token, head) element, counted at two sizes (it must be the same), and its time at
    the full size on the slowest SoC assumption (AIV 0's share of HBM = total / AIVs)."""
    per_elem = []
    for size in (_c(32, 16), _c(64, 24)):
        rows = []
        for sinks in (False, True):
            run_sfa_grad(size, sinks)
            got = tc.last_counters()
            aiv = [i for i, k in enumerate(got.kinds) if k == "aiv"]
            rows.append({c: got.values[aiv, tc.counter_names().index(c)] for c in ("gm_read_bytes", "vector_elems")})
        extra0 = {c: float(rows[1][c][0] - rows[0][c][0]) for c in rows[0]}
        extra_rest = {c: float(np.max(rows[1][c][1:] - rows[0][c][1:])) for c in rows[0]}
        n = size["s1"] * N1
        per_elem.append({c: (extra0[c] - extra_rest[c]) / n for c in extra0})
    elems = FULL["s1"] * N1
    soc = SOCS[0]
    read = per_elem[-1]["gm_read_bytes"] * elems
    vec = per_elem[-1]["vector_elems"] * elems
    seconds = read / (soc.hbm_tbs * 1e12 / soc.aiv) + vec / (64 * soc.ghz * 1e9)
    return {"per_elem_small": per_elem[0], "per_elem_large": per_elem[1], "aiv0_extra_read_bytes": read,
            "aiv0_extra_vector_elems": vec, "aiv0_extra_seconds_a2": seconds}


def fmt_si(x: float, unit: str = "") -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def fmt_time(s: float) -> str:
    return f"{s * 1e3:.3g} ms" if s >= 1e-3 else f"{s * 1e6:.3g} us"


def size_text(k: Kernel) -> str:
    f = k.full
    if "t" in f:
        return f"T {f['t']}, N {f['n']}, D {f['d']}"
    text = f"S {f['s1']}, N1 {N1}, D {D}+{DR}, Nidx {NIDX}, Didx {DIDX}"
    return text + (f", K {f['k']}" if "dense" not in k.name else "")


def markdown(rows: list[dict], sinks: dict, ctx: dict) -> str:
    head = ["kernel", "MACs", "GM bytes (workspace)", "FLOP/HBM byte", "vector elems", "scalar GM", "recompute share",
            *[f"{s.name} bound" for s in SOCS], "fit check (max rel. err)"]
    lines = [f"# {BENCH}: the Ascend kernels' cost on paper (twin counts, roofline)", "",
             "**Estimates from the twin's work counts and published peak rates, not device measurements.**", "",
             f"- Machine that counted: {ctx['cpu']['model']}, {ctx['cpu']['cores']} cores; git {ctx['git']}",
             f"- Run {ctx['run_id']} at {ctx['utc']}: `{ctx['command']}` ({ctx['seconds']:.0f} s)",
             f"- Sizes (DeepSeek-V3.2, B = 1, causal, BSND, bf16, float32 weights): {size_text(KERNELS[1])}; "
             f"vector kernels {size_text(KERNELS[-1])}.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        f = r["full"]
        gm = f["gm_read_bytes"] + f["gm_write_bytes"]
        ws = f["gm_workspace_read_bytes"] + f["gm_workspace_write_bytes"]
        cells = [r["kernel"], fmt_si(f["macs"]), f"{fmt_si(gm, 'B')} ({fmt_si(ws, 'B')})",
                 f"{2 * f['macs'] / (gm - ws):.3g}" if gm > ws else "-",
                 fmt_si(f["vector_elems"]), fmt_si(f["gm_scalar_accesses"]),
                 f"{r['recompute']['share']:.0%}" if "recompute" in r else "-"]
        for s in SOCS:
            b = r["bounds"][s.name]
            which = max(CEILINGS, key=b.get)
            cells.append(f"{fmt_time(b[which])} ({which})")
        cells.append(f"{max(r['check_error'].values()):.1e}")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Per SoC, the bound is the largest of the ceilings' times (cube, HBM for input/output bytes, "
              "L2 for all GM bytes, vector, scalar GM; which one in brackets); all of them, and HBM if the "
              "workspaces went to HBM too (`hbm_all`), are in benchmarks/results.jsonl (`bounds`).", "",
              "| SoC | cube TFLOPS (fp16/bf16) | HBM TB/s | L2 TB/s | ridge FLOP/HBM byte | source |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {s.name} | {s.cube_tflops:.0f} | {s.hbm_tbs} | {s.l2_tbs:.2g} | {s.cube_tflops / s.hbm_tbs:.0f} | "
              f"{s.source} |" for s in SOCS]
    lines += ["", f"- d_sinks (sparse_flash_attention_grad with sinks): AIV 0 alone adds "
              f"{sinks['per_elem_large']['gm_read_bytes']:.3g} GM bytes and "
              f"{sinks['per_elem_large']['vector_elems']:.3g} vector elements per (token, head) "
              f"(at the smaller size: {sinks['per_elem_small']['gm_read_bytes']:.3g}, "
              f"{sinks['per_elem_small']['vector_elems']:.3g}); at the full size "
              f"{fmt_si(sinks['aiv0_extra_read_bytes'], 'B')} and {fmt_si(sinks['aiv0_extra_vector_elems'])} elements, "
              f"about {fmt_time(sinks['aiv0_extra_seconds_a2'])} on A2 at AIV 0's share of HBM."]
    for r in rows:
        if "recompute" in r:
            rc = r["recompute"]
            lines.append(f"- {r['kernel']}: recomputed {fmt_si(rc['recomputed_macs'])} of {fmt_si(rc['total_macs'])} "
                         f"MACs ({rc['share']:.0%}); the closed formula equals the twin's MACs at every counted "
                         f"size: {'yes' if rc['formula_equals_twin'] else 'NO'}.")
    lines += [f"- {k.name}: {k.note}" for k in KERNELS if k.note and any(r["kernel"] == k.name for r in rows)]
    lines += ["- Method, peaks and their sources: scripts/bench/ascend_roofline.py and docs/ascend.md "
              "(\"Cost on paper: the twin roofline\")."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", nargs="*", help="a subset of the table (default: all)")
    ap.add_argument("--no-record", action="store_true", help="print only; write no results")
    args = ap.parse_args()
    chosen = [k for k in KERNELS if not args.kernels or k.name in args.kernels]
    unknown = set(args.kernels or ()) - {k.name for k in KERNELS}
    if unknown:
        raise SystemExit(f"unknown kernels: {sorted(unknown)}")
    start = time.time()
    rows = []
    for k in chosen:
        t0 = time.time()
        r = fit_and_scale(k)
        r["kernel"] = k.name
        r["bounds"] = {s.name: bounds(r["full"], s) for s in SOCS}
        rows.append(r)
        print(f"[{time.time() - t0:5.1f} s] {k.name}: " + json.dumps(
            {"full": r["full"], "check_error": r["check_error"], "recompute": r.get("recompute")}), flush=True)
    sinks = d_sinks_cost() if any(k.name == "sparse_flash_attention_grad" for k in chosen) else None
    now = datetime.datetime.now(datetime.timezone.utc)
    ctx = {"bench": BENCH, "run_id": f"{BENCH}-{now:%Y%m%dT%H%M%SZ}-{os.getpid()}",
           "utc": now.isoformat(timespec="seconds"), "command": " ".join(["python", *sys.argv]),
           "cpu": cpu_info(), "git": git_commit(), "seconds": time.time() - start}
    text = markdown(rows, sinks, ctx) if sinks else json.dumps(rows, indent=1)
    print(text)
    if args.no_record or not sinks or len(chosen) != len(KERNELS):
        return
    append_results({k: v for k, v in ctx.items() if k != "cpu"} | {"machine": {"cpu": ctx["cpu"]}},
                   [{**r, "size": size_text(next(k for k in KERNELS if k.name == r["kernel"]))} for r in rows]
                   + [{"kernel": "sparse_flash_attention_grad d_sinks", **sinks}])
    (ROOT / "benchmarks" / f"{BENCH}.md").write_text(text)


if __name__ == "__main__":
    main()
