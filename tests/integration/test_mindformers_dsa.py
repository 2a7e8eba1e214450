"""MindSpore Transformers 2.0.0's GRAPH-mode MLA DSA layer trains on CPU through
``ms_grad_ops.builtins.install()`` alone (examples/mindformers_dsa_cpu.py).

mindformers is installed into a folder of its own beside the venv (``tests/support/_mindformers.py``). The example
runs in a subprocess with that folder on PYTHONPATH, so the test process never imports
mindformers. About 2 minutes on 2 cores (first run: plus the install, about 45 s).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from _mindformers import run_example
from _paths import ROOT

EXAMPLE = ROOT / "examples" / "mindformers_dsa_cpu.py"
SEQ_LEN, TOPK = 8, 3
TIMEOUT = 900


@pytest.fixture(scope="module")
def run(mindformers_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The example with --check, then 3 dense and 3 sparse training steps, in one subprocess."""
    start = time.time()
    args = ["--check", "--seq-len", str(SEQ_LEN), "--topk", str(TOPK), "--dense-steps", "3", "--sparse-steps", "3"]
    out = run_example(EXAMPLE, args, mindformers_dir, tmp_path_factory.mktemp("mindformers"), TIMEOUT)
    lines = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out.splitlines()
             if line.startswith(("CHECK ", "TRAINED "))}
    assert set(lines) == {"CHECK", "TRAINED"}, out[-4000:]
    result = json.loads(lines["CHECK"])
    result["trained"] = json.loads(lines["TRAINED"])
    result["seconds"] = time.time() - start
    print(f"example: {result['seconds']:.1f} s")
    return result


def test_sparse_stage_equals_dense_path_when_topk_covers_all(run: dict) -> None:
    """(a) top-k = S: lightning_indexer + sparse KL loss (values' gradient) vs mindformers' dense
    indexer and KL loss in plain ops: loss and every parameter gradient within 3e-5."""
    a = run["a"]
    print(json.dumps(a, indent=1))
    assert a["loss_rel"] <= 3e-5, a
    assert abs(a["indexer_loss_sparse"] - a["indexer_loss_dense"]) <= 3e-5 * abs(a["indexer_loss_dense"]), a
    assert len(a["grad_rel"]) == 11  # 5 indexer + 6 MLA parameters
    for name, err in a["grad_rel"].items():
        assert err <= 3e-5, f"{name}: relative L2 {err:.3g} > 3e-5"


def test_sparse_stage_trains_the_indexer_through_its_values(run: dict) -> None:
    """(b) top-k < S: every indexer parameter gets a non-zero gradient, equal to the one through
    a float64 plain-ops computation of the selected values within 1e-5."""
    b = run["b"]
    print(json.dumps(b, indent=1))
    assert b["topk"] == TOPK < SEQ_LEN
    assert len(b["indexer_grad_rel"]) == 5
    for name, err in b["indexer_grad_rel"].items():
        assert b["indexer_grad_norm"][name] > 1e-4, f"{name}: zero gradient"
        assert err <= 1e-5, f"{name}: relative L2 {err:.3g} > 1e-5"
    for name, err in b["other_grad_rel"].items():
        assert err <= 1e-5, f"{name}: relative L2 {err:.3g} > 1e-5"
    assert abs(b["loss"] - b["loss_reference"]) <= 1e-5 * abs(b["loss_reference"])


def test_both_stages_train(run: dict) -> None:
    trained = run["trained"]
    assert len(trained["dense"]) == len(trained["sparse"]) == 3
    assert all(0 < x < 1e3 for x in trained["dense"] + trained["sparse"]), trained
