"""``nn.DSAttention`` against DeepSeek-V3.2's own code: random DeepSeek-named weights loaded through
``load_deepseek_state_dict``, the forward compared with ``_deepseek_oracle`` (a float64 NumPy
re-implementation of DeepSeek-V3.2-Exp's ``inference/model.py`` MLA + Indexer prefill); YaRN tables;
``from_deepseek``; the DeepSeek state dict's round trip, errors and FP8 dequantisation."""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import _deepseek_oracle as oracle
import mindspore as ms
import numpy as np
import pytest
import safetensors.numpy
from _hf_example import example
from _util import rel_l2
from mindspore import Tensor

import ms_grad_ops as mgo

# ModelArgs defaults of DeepSeek's inference/model.py, written out here so from_deepseek's are checked.
DEEPSEEK_DEFAULTS = {"max_seq_len": 16384, "original_seq_len": 4096, "rope_theta": 10000.0, "rope_factor": 40,
                     "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "qk_rope_head_dim": 64}
SMALL = {"dim": 32, "n_heads": 4, "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
         "qk_rope_head_dim": 8, "v_head_dim": 12, "index_n_heads": 8, "index_head_dim": 16}
# YaRN on: with rope 8 wide the ramp runs over pairs 0..2, so kept, blended and divided pairs all occur.
YARN = {"max_seq_len": 128, "original_seq_len": 64, "rope_factor": 40, "mscale": 0.7}
NO_YARN = {"max_seq_len": 32}
PREFIX = "layers.1.attn."


def _random_weights(layer: mgo.nn.DSAttention, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """DeepSeek-named float32 tensors shaped for ``layer``: matrices N(0, 1/fan_in), norm weights near 1."""
    out = {}
    for name, value in layer.deepseek_state_dict().items():
        if value.ndim == 2:
            out[name] = rng.standard_normal(value.shape) / math.sqrt(value.shape[1])
        elif name.endswith("bias"):
            out[name] = 0.1 * rng.standard_normal(value.shape)
        else:
            out[name] = 1.0 + 0.1 * rng.standard_normal(value.shape)
    return {k: v.astype(np.float32) for k, v in out.items()}


def _selected_mask(indices: np.ndarray, s: int) -> np.ndarray:
    """bool ``[S, S]`` from the layer's local indices ``[S, K]`` (-1 unused)."""
    mask = np.zeros((s, s), bool)
    for i, row in enumerate(indices):
        mask[i, row[row >= 0]] = True
    return mask


def _tied(ours: np.ndarray, theirs: np.ndarray, score: np.ndarray) -> bool:
    """Whether every key selected by one side only scores (float64) the same as the lowest key
    DeepSeek kept, to float32 resolution: a tie the two top-k's may break differently."""
    diff = ours ^ theirs
    if not diff.any():
        return True
    boundary = score[theirs].min()
    return bool(np.all(np.abs(score[diff] - boundary) <= 1e-5 * np.abs(score[theirs]).max()))


@pytest.mark.parametrize("yarn", [True, False])
@pytest.mark.parametrize("topk", [5, 64])
@pytest.mark.parametrize("layout", ["BSND", "TND"])
def test_forward_matches_deepseek(layout: str, topk: int, yarn: bool) -> None:
    ms.set_context(mode=ms.PYNATIVE_MODE)
    args = {**SMALL, "index_topk": topk, **(YARN if yarn else NO_YARN)}
    layer = mgo.nn.DSAttention.from_deepseek(args, layout=layout)
    rng = np.random.default_rng(11 + topk + 2 * yarn)
    weights = _random_weights(layer, rng)
    layer.load_deepseek_state_dict({PREFIX + k: v for k, v in weights.items()}, prefix=PREFIX)
    lens = [16, 16] if layout == "BSND" else [5, 16, 11]
    x = rng.standard_normal((sum(lens), SMALL["dim"])).astype(np.float32)
    if layout == "BSND":
        out, _ = layer(Tensor(x.reshape(2, 16, -1)))
        sel = layer.select(Tensor(x.reshape(2, 16, -1))).asnumpy().reshape(sum(lens), -1)
    else:
        cum = list(np.cumsum(lens))
        out, _ = layer(Tensor(x), cum)
        sel = layer.select(Tensor(x), cum).asnumpy().reshape(sum(lens), -1)
    out = out.asnumpy().reshape(sum(lens), -1)

    full = {**DEEPSEEK_DEFAULTS, **args}
    refs, ties, start = [], 0, 0
    for n in lens:
        xs = x[start:start + n][None].astype(np.float64)
        ref, theirs, score = oracle.forward(weights, xs, full)
        ours = _selected_mask(sel[start:start + n], n)
        for i in range(n):
            assert _tied(ours[i], theirs[0, i], score[0, i]), f"row {i}: selections differ beyond ties"
        if not np.array_equal(ours, theirs[0]):
            ties += 1
            ref, _, _ = oracle.forward(weights, xs, full, selected=ours[None])
        if topk < n:
            _, before_fix, _ = oracle.forward(weights, xs, full, indexer_interleaved=True)
            assert not np.array_equal(before_fix, theirs), "the test cannot tell the indexer's rope layouts apart"
        refs.append(ref[0])
        start += n
    err = rel_l2(out, np.concatenate(refs))
    print(f"{layout} top-{topk} yarn={yarn}: output relative L2 {err:.3g}, sequences with a tie {ties}")
    assert err <= 1e-5


def test_yarn_tables_and_scale_at_deepseek_sizes() -> None:
    """DeepSeek's rope (64 wide) and default max_seq_len 16384 > 4096: YaRN on, checked at far positions."""
    layer = mgo.nn.DSAttention.from_deepseek({"dim": 16, "n_heads": 1, "q_lora_rank": 8, "kv_lora_rank": 8,
                                              "qk_nope_head_dim": 4, "v_head_dim": 4, "index_n_heads": 1,
                                              "index_head_dim": 64, "index_topk": 4})
    full = {**DEEPSEEK_DEFAULTS, "qk_nope_head_dim": 4}
    freqs = oracle.frequencies(full)
    plain = 10000.0 ** (-np.arange(0, 64, 2) / 64)
    assert (freqs < plain).any() and (freqs == plain).any(), "YaRN should rescale some pairs and keep others"
    pos = np.array([0, 1, 2047, 4095, 4096, 12345, 16383])
    cos, sin = layer._tables_at(Tensor(pos.astype(np.int32)))
    assert np.abs(cos.asnumpy() - np.cos(pos[:, None] * freqs)).max() <= 1e-6
    assert np.abs(sin.asnumpy() - np.sin(pos[:, None] * freqs)).max() <= 1e-6
    assert math.isclose(layer.softmax_scale, oracle.softmax_scale(full), rel_tol=1e-12)
    assert math.isclose(layer.softmax_scale, 68 ** -0.5 * (0.1 * math.log(40) + 1) ** 2, rel_tol=1e-12)


def test_from_deepseek_config_json(tmp_path: Path) -> None:
    config = {"vocab_size": 129280, "n_layers": 61, "n_routed_experts": 256, "score_func": "sigmoid",
              "dtype": "fp8", "scale_fmt": "ue8m0", **SMALL, "index_topk": 7, "max_seq_len": 64}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    layer = mgo.nn.DSAttention.from_deepseek(str(path), layout="TND")
    shapes = {k: v.shape for k, v in layer.deepseek_state_dict().items()}
    assert shapes["wkv_b.weight"] == (4 * (8 + 12), 16) and shapes["indexer.wq_b.weight"] == (8 * 16, 24)
    assert layer.layout == "TND" and layer.indexer.sparse_count == 7
    assert layer.softmax_scale == 16 ** -0.5              # max_seq_len 64 <= 4096: no YaRN factor
    with pytest.raises(ValueError, match=r"unknown ModelArgs names \['n_kv_heads'\]"):
        mgo.nn.DSAttention.from_deepseek({**config, "n_kv_heads": 2})
    with pytest.raises(ValueError, match="q_lora_rank must be > 0"):
        mgo.nn.DSAttention.from_deepseek({k: v for k, v in config.items() if k != "q_lora_rank"})
    from_object = mgo.nn.DSAttention.from_deepseek(SimpleNamespace(**config), max_seq_len=8192, rope_factor=4)
    assert math.isclose(from_object.softmax_scale, 16 ** -0.5 * (0.1 * math.log(4) + 1) ** 2, rel_tol=1e-12)
    with pytest.raises(ValueError, match="YaRN .* needs positive"):
        mgo.nn.DSAttention.from_deepseek(config, max_seq_len=8192, rope_factor=0)


def _small_layer(**over: int) -> mgo.nn.DSAttention:
    return mgo.nn.DSAttention.from_deepseek({**SMALL, "index_topk": 4, "max_seq_len": 16, **over})


def test_state_dict_round_trip_is_bitwise(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    layer = _small_layer()
    weights = _random_weights(layer, rng)
    weights["wo.weight"][0, :3] = [-0.0, 1e-42, np.float32(np.pi)]      # signed zero, subnormal
    layer.load_deepseek_state_dict(weights)
    back = layer.deepseek_state_dict()
    assert sorted(back) == sorted(weights)
    for name, value in weights.items():
        assert back[name].dtype == np.float32 and np.array_equal(back[name].view(np.uint32), value.view(np.uint32))

    # Through a safetensors file written by the safetensors package, beside other layers' tensors.
    path = tmp_path / "model.safetensors"
    other = {"layers.0.attn.wq_a.weight": np.zeros((3, 3), np.float32),
             "layers.1.ffn.w1.weight": np.ones(2, np.float32)}
    safetensors.numpy.save_file({**other, **layer.deepseek_state_dict(PREFIX)}, str(path))
    again = _small_layer()
    again.load_deepseek_state_dict(str(path), prefix=PREFIX)
    for p, q in zip(layer.trainable_params(), again.trainable_params()):
        assert p.name == q.name and np.array_equal(p.asnumpy().view(np.uint32), q.asnumpy().view(np.uint32)), p.name


def test_state_dict_errors_name_every_problem() -> None:
    layer = _small_layer()
    state = layer.deepseek_state_dict()
    del state["kv_norm.weight"]
    state["indexer.wq.weight"] = state["indexer.wq_b.weight"]
    state["wo.weight"] = state["wo.weight"].T
    state["indexer.k_norm.bias"] = np.zeros(15, np.float32)
    with pytest.raises(ValueError) as info:
        layer.load_deepseek_state_dict(state)
    msg = str(info.value)
    for part in ("DSAttention.load_deepseek_state_dict", "missing tensors ['kv_norm.weight']",
                 "unexpected tensors ['indexer.wq.weight']", "wo.weight (expected [32, 48], got [48, 32])",
                 "indexer.k_norm.bias (expected [16], got [15])"):
        assert part in msg, msg
    with pytest.raises(TypeError, match="wq_a.weight has dtype int32"):
        layer.load_deepseek_state_dict({**layer.deepseek_state_dict(), "wq_a.weight": np.zeros((24, 32), np.int32)})


# -- FP8 ------------------------------------------------------------------------------------------

def _fp8(rng: np.random.Generator, shape: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Random float8_e4m3fn bytes and their values, built from (sign, exponent, mantissa) fields
    (exponent 0 = subnormals; 0x7f/0xff, NaN, avoided)."""
    sign = rng.integers(0, 2, shape)
    exp = rng.integers(0, 16, shape)
    man = rng.integers(0, 8, shape)
    man = np.where((exp == 15) & (man == 7), 6, man)
    value = np.where(exp == 0, man / 8 * 2.0 ** -6, (1 + man / 8) * 2.0 ** (exp - 7.0)) * (1 - 2 * sign)
    return ((sign << 7) | (exp << 3) | man).astype(np.uint8), value


FP8_WEIGHTS = ("wq_a.weight", "wq_b.weight", "wkv_a.weight", "wkv_b.weight", "wo.weight", "indexer.wq_b.weight",
               "indexer.wk.weight")


def test_fp8_checkpoint_is_dequantised_per_block(tmp_path: Path) -> None:
    """DeepSeek's FP8 layout: float8_e4m3fn linear weights, a float32 ``.scale`` per 128 x 128 block
    (dim 160: two column blocks for wq_a/wkv_a/wk, two row blocks for wo), bfloat16 norms and
    weights_proj."""
    rng = np.random.default_rng(4)
    layer = _small_layer(dim=160)
    tensors, expected = {}, {}
    for name, value in layer.deepseek_state_dict().items():
        if name in FP8_WEIGHTS:
            raw, val = _fp8(rng, value.shape)
            scale = rng.uniform(0.5, 2.0, (-(-value.shape[0] // 128), -(-value.shape[1] // 128))).astype(np.float32)
            tensors[PREFIX + name] = ("F8_E4M3", raw)
            tensors[PREFIX + name[:-len("weight")] + "scale"] = ("F32", scale)
            block = np.repeat(np.repeat(scale.astype(np.float64), 128, 0), 128, 1)[:value.shape[0], :value.shape[1]]
            expected[name] = val * block
        else:
            full = rng.standard_normal(value.shape).astype(np.float32)
            bits = (full.view(np.uint32) >> 16).astype(np.uint16)          # bfloat16: the top half
            tensors[PREFIX + name] = ("BF16", bits)
            expected[name] = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    path = tmp_path / "fp8.safetensors"
    example.write_safetensors(path, tensors)
    layer.load_deepseek_state_dict(path, prefix=PREFIX)
    got = layer.deepseek_state_dict()
    for name, value in expected.items():
        assert np.array_equal(got[name].astype(np.float64), value.astype(np.float32).astype(np.float64)), name
    assert (np.abs(expected["wo.weight"]) < 2.0 ** -6).any(), "no subnormal FP8 value drawn"

    del tensors[PREFIX + "wkv_b.scale"]
    tensors[PREFIX + "q_norm.scale"] = ("F32", np.ones((1, 1), np.float32))
    example.write_safetensors(path, tensors)
    with pytest.raises(ValueError) as info:
        layer.load_deepseek_state_dict(path, prefix=PREFIX)
    assert "wkv_b.weight is float8_e4m3fn but has no wkv_b.scale" in str(info.value)
    assert "q_norm.scale given for q_norm.weight, which is not float8_e4m3fn" in str(info.value)
