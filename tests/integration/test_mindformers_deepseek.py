"""MindSpore Transformers 2.0.0's whole DeepSeek-V3.2 model (``DeepseekV3ForCausalLM``: MLA + DSA,
MoE with a shared expert, MTP) trains on CPU in GRAPH mode through ``ms_grad_ops.builtins.install()``
(examples/mindformers_deepseek_cpu.py): both stages of the recipe, a few steps each.

mindformers is installed into a folder of its own beside the venv (``tests/support/_mindformers.py``);
the example runs in a subprocess. About 2 minutes on 2 cores (two graph compiles).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from _mindformers import run_example
from _paths import EXAMPLES

STEPS = 3
TIMEOUT = 900


@pytest.fixture(scope="module")
def result(mindformers_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = run_example(EXAMPLES / "mindformers_deepseek_cpu.py", ["--check", "--steps", str(STEPS)], mindformers_dir,
                      tmp_path_factory.mktemp("deepseek"), TIMEOUT)
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, out[-4000:]
    found = json.loads(lines[0].split(" ", 1)[1])
    print(json.dumps({k: v for k, v in found.items() if k != "losses"}, indent=1))
    return found


def test_both_stages_train(result: dict) -> None:
    """The example's own checks: falling losses, a non-zero gradient for every trainable parameter."""
    assert all(result["ok"].values()), result["ok"]
    for stage in ("dense_warmup", "sparse"):
        assert len(result[stage]["losses"]) == STEPS
        assert not result[stage]["zero_grad"], result[stage]["zero_grad"]


def test_warmup_trains_only_the_indexers_and_sparse_trains_all(result: dict) -> None:
    """Warm-up: the lightning indexers' 5 parameters in each of the 2 decoder layers and the MTP
    layer; sparse stage: every parameter of the model (DSA, the MoE's experts, router and shared
    expert, MTP), all with non-zero gradients."""
    assert result["dense_warmup"]["n_params"] == 15
    assert result["sparse"]["n_params"] > 40
    warm, sparse = result["dense_warmup"]["losses"], result["sparse"]["losses"]
    assert all(h["mtp"] > 0 and h["indexer"] > 0 and h["aux"] > 0 for h in warm + sparse)
    assert sparse[-1]["total"] < sparse[0]["total"]
