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


# ----------------------------------------------------------------------------------------------
# apply_dsa_kernel_fusion=True: hyper-parallel's fused ops bound to ms_grad_ops.builtins
# ----------------------------------------------------------------------------------------------
def _dump(tmp_path_factory: pytest.TempPathFactory, name: str, options: list[str]) -> tuple[dict, dict]:
    folder = tmp_path_factory.mktemp(name)
    dump = folder / f"{name}.npz"
    out = run_example(EXAMPLES / "mindformers_v4_cpu.py",
                      ["--check", "--steps", str(STEPS), "--dump", str(dump), "--mindformers", CHECKOUT, *options],
                      Path(CHECKOUT), folder, TIMEOUT)
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, out[-4000:]
    return json.loads(lines[0].split(" ", 1)[1]), dict(np.load(dump))


# S a multiple of 16: mindformers' fused indexer derives cmp_residual_k from its compressed key count
# (examples/mindformers_v4_cpu.py's docstring), which agrees with CANN's causal rule only then.
FUSED_SIZES = ["--seq-len", "304"]


@pytest.fixture(scope="module")
def fused(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    """``--fused`` (its window is 128, the only one mindformers' fused path accepts)."""
    return _dump(tmp_path_factory, "fused", ["--fused", *FUSED_SIZES])


@pytest.fixture(scope="module")
def unfused_128(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    """The unfused layers with the fused run's window, weights and inputs."""
    return _dump(tmp_path_factory, "unfused_128", ["--window", "128", *FUSED_SIZES])


@pytest.mark.parametrize("ratio", RATIOS)
def test_fused_equals_unfused(fused: tuple[dict, dict], unfused_128: tuple[dict, dict], ratio: int) -> None:
    """Same weights and inputs: the fused layer's output and every gradient of ``sum(out * G)`` outside the
    indexer equal the unfused layer's, max |difference| / max |value| <= 1e-5 each (float32 precision);
    ratio 4's visible picks identical."""
    (_, got), (_, want) = fused, unfused_128
    assert int(got["size.csa_window_size"]) == int(want["size.csa_window_size"]) == 128
    names = [k for k in want if k.startswith(f"{ratio}.grad.")] + [f"{ratio}.out"]
    assert sorted(k for k in got if k.startswith(f"{ratio}.grad.")) == sorted(names[:-1])
    assert np.array_equal(got["x"], want["x"]) and np.array_equal(got["g"], want["g"])
    assert all(np.array_equal(got[k], want[k]) for k in want if k.startswith(f"{ratio}.param."))
    errors = {}
    for name in names:
        errors[name] = float(np.abs(got[name] - want[name]).max() / np.abs(want[name]).max())
    print(f"ratio {ratio}: " + ", ".join(f"{k} {e:.2g}" for k, e in sorted(errors.items(), key=lambda kv: -kv[1])))
    assert max(errors.values()) <= 1e-5, errors
    if ratio == 4:  # each path's raw top-k, the entries not yet visible set to -1 (the fused one has -1 there)
        def visible(picks: np.ndarray) -> np.ndarray:
            return np.sort(np.where(picks < (np.arange(1, picks.shape[1] + 1) // 4)[None, :, None], picks, -1), -1)

        assert np.array_equal(visible(got["4.picks"]), visible(want["4.picks"]))


def test_fused_indexer_gradient_is_canns_kl(fused: tuple[dict, dict]) -> None:
    """The fused layer's indexer gradients are those of the KL loss against CANN's raw target
    (``cmp_softmax_l1_norm``: the head-mean attention probability of each pick, the window and sink
    holding the rest, never renormalised) scaled by ``coeff / (B S)``: ``<grad, V>`` vs the port's central
    difference of ``indexer_kl_loss`` along a random V, error / (|grad| |V|) <= 2e-2 (mindformers feeds
    the indexer's query and key to the kernel in bfloat16). The unfused path's loss is another one
    (a target renormalised over the picks, no window or sink), so its indexer gradients are not compared."""
    _, dump = fused
    args, params, x = _args(dump), _params(dump, 4), _x(dump)
    target = np.zeros(dump["4.picks"].shape)
    _, picks = port.attention(args, params, x, 4, target=target)
    rng = np.random.default_rng(44)
    step = 1e-6
    names = [k[len("4.igrad."):] for k in dump if k.startswith("4.igrad.")]
    assert len(names) == 6, names
    worst = {}
    for name in names:
        grad = dump[f"4.igrad.{name}"].astype(np.float64)
        v = rng.standard_normal(grad.shape)
        up = port.indexer_kl_loss(args, {**params, name: params[name] + step * v}, x, target, picks, 1.0)
        down = port.indexer_kl_loss(args, {**params, name: params[name] - step * v}, x, target, picks, 1.0)
        worst[name] = abs((up - down) / (2 * step) - float((grad * v).sum())) / (
            np.linalg.norm(grad) * np.linalg.norm(v))
    print("fused indexer: " + ", ".join(f"{k} {e:.2g}" for k, e in sorted(worst.items(), key=lambda kv: -kv[1])))
    assert max(worst.values()) <= 2e-2, worst
