"""MindSpore Transformers 2.0.0's GRAPH-mode MLA DSA layer trains on CPU through
``ms_grad_ops.builtins.install()`` alone (examples/mindformers_dsa_cpu.py).

mindformers is installed into a folder of its own (``pip install --no-deps --target``: its
``hyper-parallel`` requirement is not on PyPI, and the rest of its requirements are not needed by
the DSA layer), with the few packages its modules import pinned, cached beside the venv and reused.
The example runs in a subprocess with that folder on PYTHONPATH, so the test process never imports
mindformers. About 2 minutes on 2 cores (first run: plus the install, about 45 s).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _paths import ROOT

EXAMPLE = ROOT / "examples" / "mindformers_dsa_cpu.py"
# mindformers 2.0.0 (the release paired with MindSpore 2.10) and what its modules import on the
# way to the DSA layer, at versions that work with numpy < 2 (none of them needs numpy).
PINS = ("mindformers==2.0.0", "regex==2026.9.29", "pyyaml==6.0.3", "deprecated==1.2.18", "wrapt==1.17.3",
        "requests==2.34.2", "urllib3==2.8.0", "idna==3.20", "certifi==2026.7.22", "charset_normalizer==3.5.2")
SEQ_LEN, TOPK = 8, 3
TIMEOUT = 900


def _target() -> Path:
    return Path(os.environ.get("MGO_MINDFORMERS_DIR", Path(sys.prefix) / "mgo-mindformers-2.0.0"))


@pytest.fixture(scope="module")
def mindformers_dir() -> Path:
    """The folder holding mindformers 2.0.0 and its pinned imports (installed once, then reused)."""
    target = _target()
    marker = target / ".mgo-pins"
    if marker.is_file() and marker.read_text() == "\n".join(PINS):
        return target
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(staging), *PINS]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}"
    (staging / ".mgo-pins").write_text("\n".join(PINS))
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


@pytest.fixture(scope="module")
def run(mindformers_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The example with --check, then 3 dense and 3 sparse training steps, in one subprocess."""
    env = dict(os.environ)  # not inherited implicitly: `import mindspore` set OMP_NUM_THREADS=1 in C
    env["PYTHONPATH"] = os.pathsep.join([str(mindformers_dir), *filter(None, [env.get("PYTHONPATH")])])
    cmd = [sys.executable, str(EXAMPLE), "--check", "--seq-len", str(SEQ_LEN), "--topk", str(TOPK),
           "--dense-steps", "3", "--sparse-steps", "3"]
    start = time.time()
    proc = subprocess.Popen(cmd, cwd=tmp_path_factory.mktemp("mindformers"), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the example did not finish in {TIMEOUT} s:\n{out[-4000:]}")
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{out[-6000:]}"
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
