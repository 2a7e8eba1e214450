"""MindSpore Transformers master's DeepSeek-V4 attention (pynative ``DSv4HybridSelfAttention``, unfused)
trains on CPU through ``ms_grad_ops.builtins.install()`` (examples/mindformers_v4_cpu.py), one layer
per compress ratio (0, 4, 128), and equals a float64 port of DeepSeek-V4's ``inference/model.py``
(``_deepseek_v4_port``): outputs to float32 precision, the indexer's picks exactly, and every
gradient outside the indexer against the port's central differences.

Needs a mindformers master checkout: set ``MGO_MINDFORMERS_MASTER`` to the folder holding
``mindformers/`` (none of its code is in this repository; the example runs in a subprocess, so the
test process never imports it). About a minute on 2 cores.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from _mindformers import run_example
from _paths import EXAMPLES

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _deepseek_v4_port as port  # noqa: E402

RATIOS = (0, 4, 128)
STEPS = 4
TIMEOUT = 900
CHECKOUT = os.environ.get("MGO_MINDFORMERS_MASTER")

pytestmark = pytest.mark.skipif(
    not CHECKOUT, reason="MGO_MINDFORMERS_MASTER (a mindformers master checkout) is not set: CI has no copy")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    """The example's RESULT and its dump (inputs, parameters, outputs, picks, gradients)."""
    folder = tmp_path_factory.mktemp("v4")
    dump = folder / "v4.npz"
    out = run_example(EXAMPLES / "mindformers_v4_cpu.py",
                      ["--check", "--steps", str(STEPS), "--dump", str(dump), "--mindformers", CHECKOUT],
                      Path(CHECKOUT), folder, TIMEOUT)
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, out[-4000:]
    return json.loads(lines[0].split(" ", 1)[1]), dict(np.load(dump))


def _args(dump: dict) -> port.V4Args:
    def size(key: str) -> object:
        return dump[f"size.{key}"].item()

    return port.V4Args(
        dim=size("hidden_size"), n_heads=size("num_attention_heads"), head_dim=size("v_head_dim"),
        rope_dim=size("qk_pos_emb_head_dim"), q_lora_rank=size("q_lora_rank"), o_groups=size("o_groups"),
        o_lora_rank=size("o_lora_rank"), window=size("csa_window_size"), index_heads=size("dsa_indexer_n_heads"),
        index_head_dim=size("dsa_indexer_head_dim"), index_topk=size("dsa_indexer_topk"), base=size("rotary_base"),
        compress_base=size("csa_compress_rotary_base"), factor=size("rotary_scaling_factor"),
        original_seq_len=size("original_max_position_embeddings"), beta_fast=size("beta_fast"),
        beta_slow=size("beta_slow"), eps=size("layernorm_epsilon"))


def _params(dump: dict, ratio: int) -> dict[str, np.ndarray]:
    prefix = f"{ratio}.param."
    return {k[len(prefix):]: v.astype(np.float64) for k, v in dump.items() if k.startswith(prefix)}


def _x(dump: dict) -> np.ndarray:
    return dump["x"].transpose(1, 0, 2)  # mindformers' [S, B, dim] -> DeepSeek's [B, S, dim]


@pytest.mark.parametrize("ratio", RATIOS)
def test_forward_equals_deepseek(run: tuple[dict, dict], ratio: int) -> None:
    """mindformers' float32 layer vs the float64 port: max |difference| / max |output| <= 5e-6
    (measured ~1e-6), and for ratio 4 the indexer's picks identical (mindformers' raw top-k with
    the entries it then drops as not yet visible set to -1, as DeepSeek's)."""
    _, dump = run
    want, want_picks = port.attention(_args(dump), _params(dump, ratio), _x(dump), ratio)
    got = dump[f"{ratio}.out"].transpose(1, 0, 2)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    print(f"ratio {ratio}: forward relative error {err:.3g}")
    assert err <= 5e-6
    if ratio == 4:
        picks = dump["4.picks"]
        visible = picks < (np.arange(1, picks.shape[1] + 1) // ratio)[None, :, None]
        assert np.array_equal(np.where(visible, picks, -1), want_picks)


@pytest.mark.parametrize("ratio", RATIOS)
def test_gradients_equal_deepseek(run: tuple[dict, dict], ratio: int) -> None:
    """The gradient of ``sum(out * G)`` with respect to x and every parameter outside the indexer
    (whose own gradient comes from its KL loss), along a random direction V: mindformers'
    ``<grad, V>`` vs the port's central difference, error / (|grad| |V|) <= 1e-5. MindSpore's own
    ``mint.split`` gradient would be off by order 1 here (tests/cpu_gaps/test_gap_split_grad.py)."""
    _, dump = run
    args, params, x = _args(dump), _params(dump, ratio), _x(dump)
    g = dump["g"].transpose(1, 0, 2)
    rng = np.random.default_rng(ratio)
    step = 1e-6

    def objective(p: dict, xx: np.ndarray) -> float:
        return float((port.attention(args, p, xx, ratio)[0] * g).sum())

    names = [k[len(f"{ratio}.grad."):] for k in dump if k.startswith(f"{ratio}.grad.")]
    assert "x" in names and len(names) == (9 if ratio == 0 else 13), names
    worst = {}
    for name in names:
        grad = dump[f"{ratio}.grad.{name}"].astype(np.float64)
        if name == "x":
            grad = grad.transpose(1, 0, 2)
        v = rng.standard_normal(grad.shape)
        if name == "x":
            up, down = objective(params, x + step * v), objective(params, x - step * v)
        else:
            up = objective({**params, name: params[name] + step * v}, x)
            down = objective({**params, name: params[name] - step * v}, x)
        err = abs((up - down) / (2 * step) - float((grad * v).sum())) / (np.linalg.norm(grad) * np.linalg.norm(v))
        worst[name] = err
    print(f"ratio {ratio}: " + ", ".join(f"{k} {e:.2g}" for k, e in sorted(worst.items(), key=lambda kv: -kv[1])))
    assert max(worst.values()) <= 1e-5, worst


def test_every_layer_trains(run: tuple[dict, dict]) -> None:
    """The example's checks: each layer's loss falls over the steps, every trainable parameter
    (the indexer's too, through mindformers' KL loss) gets a non-zero gradient."""
    result, _ = run
    assert all(result["ok"].values()), result["ok"]
    counts = {r: result["trained"][str(r)]["n_params"] for r in RATIOS}
    assert counts == {0: 8, 4: 18, 128: 12}, counts
    for r in RATIOS:
        assert len(result["trained"][str(r)]["losses"]) == STEPS
