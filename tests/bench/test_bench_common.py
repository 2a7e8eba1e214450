"""The benchmarks' in-process GEMM ceiling (cpu/gemm_rate.cc through scripts/bench/common.py) and
their results file: one call of the timed GEMM against a float64 NumPy product, the rate entry's
argument checks, the oneDNN identification, the ceiling formula, and the Markdown rewrite from the
latest run's JSON rows."""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from _paths import ROOT
from _util import quantize

_spec = importlib.util.spec_from_file_location("bench_common", ROOT / "scripts/bench/common.py")
common = sys.modules["bench_common"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(common)


def _bench_module(name: str) -> object:
    """A benchmark script as a module (they import ``common`` by that name, MindSpore lazily)."""
    sys.modules.setdefault("common", common)
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / f"scripts/bench/{name}.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    return (quantize(x, "bfloat16").astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


@pytest.mark.parametrize("bf16", [False, True], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
def test_timed_gemm_matches_numpy(bf16: bool, ta: bool, tb: bool) -> None:
    rng = np.random.default_rng(7)
    m, n, k = 37, 53, 29
    a = rng.standard_normal((k, m) if ta else (m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32)
    if bf16:
        a64, b64 = quantize(a, "bfloat16"), quantize(b, "bfloat16")
        c = common.gemm(_bf16_bits(a), _bf16_bits(b), ta, tb)
    else:
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        c = common.gemm(a, b, ta, tb)
    ref = (a64.T if ta else a64) @ (b64.T if tb else b64)
    assert c.shape == (m, n) and np.isfinite(c).all()
    assert np.linalg.norm(c - ref) <= 1e-5 * np.linalg.norm(ref)


def test_gemm_rate_runs_and_rejects_bad_arguments() -> None:
    rate = common.kernel_library().MgoGemmRate(0, 0, 1, 16, 64, 32, 2, 0.05)
    assert math.isfinite(rate) and rate > 0.01
    lib = common.kernel_library()
    assert lib.MgoGemmRate(0, 0, 0, 0, 64, 32, 2, 0.05) == -1.0
    assert lib.MgoGemmRate(1, 0, 0, 16, 64, 32, 0, 0.05) == -1.0
    assert lib.MgoGemmRate(0, 0, 0, 16, 64, 32, 1, 0.0) == -1.0
    with pytest.raises(ValueError, match="do not chain"):
        common.gemm(np.ones((3, 4), np.float32), np.ones((5, 2), np.float32))


def test_running_onednn_is_identified() -> None:
    info = common.dnnl_info()
    major, minor, patch = (int(x) for x in info["version"].split("."))
    assert major == 3 and minor >= 0 and patch >= 0
    assert Path(info["path"]).name.startswith("libdnnl.so") and Path(info["path"]).exists()
    assert info["runtime"] in common.DNNL_RUNTIMES.values()
    assert common.bf16_native() in (True, False)


def test_ceiling_is_flop_weighted_harmonic_mean(monkeypatch: pytest.MonkeyPatch) -> None:
    rates = {(8, 64, 16): 100.0, (8, 16, 64): 25.0}
    monkeypatch.setattr(common, "gemm_rate", lambda bf16, ta, tb, m, n, k, threads: rates[(m, n, k)])
    prods = [common.Product("s", 8, 64, 16), common.Product("o", 8, 16, 64)]
    ceil = common.ceiling(prods, "float32")
    # equal FLOPs: 2 / (1/100 + 1/25) = 40
    assert ceil["gflops"] == pytest.approx(40.0)
    assert [p["gflops"] for p in ceil["products"]] == [100.0, 25.0]
    assert common.ceiling_cell({"ceiling": ceil}) == "40 (float32; s 100, o 25)"
    assert common.keys_per_row(1000, 10) == 128 and common.keys_per_row(640, 10) == 64


def test_ceiling_products_count_the_kernels_flops() -> None:
    """The ceiling's GEMMs are the work the kernels' GFLOP/s counts, so the ratio compares like with like."""
    sfa = _bench_module("sparse_flash_attention")
    for n1, kv in ((16, 64), (64, 1088)):
        assert sum(p.flops for p in sfa.fwd_products(n1, kv)) == sfa.fwd_flops(n1, kv)
        assert sum(p.flops for p in sfa.grad_products(n1, kv)) == sfa.grad_flops(n1, kv)
    li = _bench_module("lightning_indexer")
    a = argparse.Namespace(s1=10, s2=10, k=4, n1=16, d=512, dr=64, nidx=64, didx=128)
    selected = np.minimum(li.visible(a), a.k)
    assert sum(p.flops for p in li.grad_products(a, 1)) * selected.sum() == li.grad_flops(a, selected)
    assert sum(p.flops for p in li.fwd_products(a, 1)) * li.visible(a).sum() == li.fwd_flops(a)
    assert sfa.visible_keys(100, 16) == sfa.causal_indices(100, 16)[1]
    lig = _bench_module("lightning_indexer_grad")
    selected = lig.selected(a)
    assert sum(p.flops for p in lig.grad_products(a, 1)) * selected.sum() == lig.grad_flops(a, selected)


def test_markdown_comes_from_the_latest_run(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    machine = {"cpu": {"model": "M", "cores": 2, "flags": {"avx2": True}}, "omp_num_threads": "unset",
               "onednn": {"version": "3.10.1", "hash": "h", "runtime": "threadpool", "path": "/x/libdnnl.so.3"},
               "mindspore": "2.10.0", "numpy": "1.26.4", "torch": "not installed", "git": "abc"}
    for run, values in (("r1", [1.0, 2.0]), ("r2", [3.5])):
        ctx = {"bench": "b", "run_id": run, "utc": "t", "command": "c", "machine": machine}
        common.append_results(ctx, [{"section": "S", "time": v} for v in values], path)
    common.append_results({"bench": "other", "run_id": "r3", "utc": "t", "command": "c", "machine": machine},
                          [{"section": "S", "time": 9.0}], path)
    assert len(path.read_text().splitlines()) == 4 and json.loads(path.read_text().splitlines()[0])["time"] == 1.0
    md = common.write_markdown("b", "T", [("S", [("time", lambda r: common.fmt(r["time"], ".1f"))])], ["n"], path)
    text = md.read_text()
    assert md == tmp_path / "b.md"
    assert "| 3.5 |" in text and "| 1.0 |" not in text and "| 9.0 |" not in text
    assert "3.10.1 (threadpool runtime" in text and "Run r2" in text
