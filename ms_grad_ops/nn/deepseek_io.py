"""DeepSeek-V3.2 interchange for ``nn.DSAttention``: its ``ModelArgs`` (a dict or ``config.json``)
and one attention layer's tensors under the names of DeepSeek's ``inference/model.py`` (module
``MLA``: ``wq_a.weight``, ``q_norm.weight``, ..., ``indexer.weights_proj.weight``), as NumPy arrays
or read from a safetensors file (read here with NumPy only: the format is a JSON header and raw
little-endian buffers, and NumPy has no bfloat16/float8 for the ``safetensors`` package to return).

FP8 checkpoints (DeepSeek's ``dtype: "fp8"``): a ``float8_e4m3fn`` weight comes with a float32
``<name>.scale`` (or ``<name>.weight_scale_inv``, the Hugging Face name) of shape
``[ceil(out / 128), ceil(in / 128)]``, one factor per 128 x 128 block; it is dequantised to
``weight * scale`` per block, which is the value DeepSeek's ``weight_dequant`` / ``fp8_gemm`` use.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import _yarn

FP8_BLOCK = 128

# DeepSeek's ModelArgs fields and defaults (inference/model.py); those DSAttention takes are mapped in
# LAYER_ARGS, the rest (vocabulary, MoE, batch, dtype) describe other parts of the model.
MODEL_ARGS: dict[str, Any] = {
    "max_batch_size": 8, "max_seq_len": 4096 * 4, "dtype": "bf16", "scale_fmt": None, "vocab_size": 102400,
    "dim": 2048, "inter_dim": 10944, "moe_inter_dim": 1408, "n_layers": 27, "n_dense_layers": 1, "n_heads": 16,
    "n_routed_experts": 64, "n_shared_experts": 2, "n_activated_experts": 6, "n_expert_groups": 1,
    "n_limited_groups": 1, "score_func": "softmax", "route_scale": 1.0, "q_lora_rank": 0, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "original_seq_len": _yarn.ORIGINAL_SEQ_LEN, "rope_theta": _yarn.ROPE_THETA, "rope_factor": _yarn.ROPE_FACTOR,
    "beta_fast": _yarn.BETA_FAST, "beta_slow": _yarn.BETA_SLOW, "mscale": _yarn.MSCALE,
    "index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048,
}
LAYER_ARGS = ("dim", "n_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
              "index_n_heads", "index_head_dim", "index_topk", "max_seq_len", "rope_theta", "original_seq_len",
              "rope_factor", "beta_fast", "beta_slow", "mscale")

# DeepSeek's name -> the DSAttention attribute path holding it (wkv_b is split, see below).
NAMES = {
    "wq_a.weight": "wq_a.weight", "q_norm.weight": "q_norm.weight", "wq_b.weight": "wq_b.weight",
    "wkv_a.weight": "wkv_a.weight", "kv_norm.weight": "kv_norm.weight", "wkv_b.weight": None,
    "wo.weight": "wo.weight", "indexer.wq_b.weight": "wq_idx.weight", "indexer.wk.weight": "wk_idx.weight",
    "indexer.k_norm.weight": "k_norm.gamma", "indexer.k_norm.bias": "k_norm.beta",
    "indexer.weights_proj.weight": "weights_proj.weight",
}
SCALE_SUFFIXES = (".scale", ".weight_scale_inv")

_SAFETENSORS_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
                       "F8_E4M3": np.uint8}


def model_args(args: object) -> dict[str, Any]:
    """DeepSeek's ``ModelArgs`` as a dict with its defaults filled in, from a mapping, a path to a
    ``config.json`` or an object with those attributes; unknown names are a ``ValueError``."""
    if isinstance(args, (str, os.PathLike)):
        with open(args) as f:
            args = json.load(f)
    elif not isinstance(args, Mapping):
        args = dict(vars(args))
    unknown = sorted(set(args) - set(MODEL_ARGS))
    if unknown:
        raise ValueError(f"DSAttention.from_deepseek: unknown ModelArgs names {unknown}")
    merged = {**MODEL_ARGS, **args}
    if not merged["q_lora_rank"]:
        raise ValueError("DSAttention.from_deepseek: q_lora_rank must be > 0 (V3.2's indexer reads the query "
                         f"latent), got {merged['q_lora_rank']}")
    return merged


def layer_kwargs(args: object) -> dict[str, Any]:
    """The ``DSAttention`` constructor arguments for DeepSeek ``args`` (see :func:`model_args`)."""
    merged = model_args(args)
    return {k: merged[k] for k in LAYER_ARGS}


# -- tensors -----------------------------------------------------------------------------------------

def _e4m3fn_table() -> np.ndarray:
    """float32 value of each float8_e4m3fn byte: sign, 4 exponent bits (bias 7), 3 mantissa bits;
    exponent 0 is subnormal, 0x7f/0xff are NaN, there is no infinity."""
    b = np.arange(256)
    exp, man = (b >> 3) & 0xF, b & 0x7
    mag = np.where(exp == 0, man / 8.0 * 2.0 ** -6, (1 + man / 8.0) * 2.0 ** (exp - 7.0))
    mag = np.where((b & 0x7F) == 0x7F, np.nan, mag)
    return np.where(b & 0x80, -mag, mag).astype(np.float32)


_E4M3FN = _e4m3fn_table()


class _Fp8:
    """float8_e4m3fn values as float32 (exact), marked so the loader asks for their block scales."""

    def __init__(self, values: np.ndarray) -> None:
        self.values, self.shape = values, values.shape


def read_safetensors(path: str | os.PathLike, prefix: str = "") -> dict[str, np.ndarray | _Fp8]:
    """The tensors of a safetensors file whose names start with ``prefix`` (the prefix removed), as
    float32 NumPy arrays (BF16/F16 widened exactly; float64 rounded), FP8 ones marked for dequantisation.
    Only those tensors' bytes are read."""
    out: dict[str, np.ndarray | _Fp8] = {}
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        for name, info in header.items():
            if name == "__metadata__" or not name.startswith(prefix):
                continue
            if info["dtype"] not in _SAFETENSORS_DTYPES:
                raise ValueError(f"DSAttention.load_deepseek_state_dict: {name} has dtype {info['dtype']}, "
                                 f"expected one of {sorted(_SAFETENSORS_DTYPES)}")
            begin, end = info["data_offsets"]
            f.seek(8 + n + begin)
            raw = np.frombuffer(f.read(end - begin), np.dtype(_SAFETENSORS_DTYPES[info["dtype"]]).newbyteorder("<"))
            raw = raw.reshape(info["shape"])
            if info["dtype"] == "BF16":
                value = (raw.astype(np.uint32) << 16).view(np.float32)
            elif info["dtype"] == "F8_E4M3":
                value = _Fp8(_E4M3FN[raw])
            else:
                value = raw.astype(np.float32)
            out[name[len(prefix):]] = value
    return out


def _as_float(name: str, value: object) -> np.ndarray | _Fp8:
    """A user's array as float32; a ``float8_e4m3fn`` one (ml_dtypes, torch's ``.numpy()`` of it
    cannot exist) is marked for dequantisation."""
    if isinstance(value, _Fp8):
        return value
    arr = np.asarray(value)
    if arr.dtype.name == "float8_e4m3fn":
        return _Fp8(arr.astype(np.float32))
    if arr.dtype.kind != "f" and arr.dtype.name != "bfloat16":
        raise TypeError(f"DSAttention.load_deepseek_state_dict: {name} has dtype {arr.dtype}, expected a float "
                        "dtype (or float8_e4m3fn with its .scale)")
    return arr.astype(np.float32)


def _dequantise(name: str, weight: _Fp8, scale: np.ndarray) -> np.ndarray:
    """``weight * scale`` per 128 x 128 block (DeepSeek's block-wise FP8 weights)."""
    rows, cols = weight.shape
    want = (-(-rows // FP8_BLOCK), -(-cols // FP8_BLOCK))
    if scale.shape != want:
        raise ValueError(f"DSAttention.load_deepseek_state_dict: the scale of {name} has shape {list(scale.shape)}, "
                         f"expected {list(want)} for a {rows} x {cols} FP8 weight in {FP8_BLOCK} x {FP8_BLOCK} blocks")
    full = np.repeat(np.repeat(scale.astype(np.float32), FP8_BLOCK, 0), FP8_BLOCK, 1)[:rows, :cols]
    return weight.values * full


def _floats(state: Mapping[str, object]) -> tuple[dict[str, np.ndarray], list[str]]:
    """The DeepSeek-named tensors in float32, FP8 weights dequantised with their block scales, and
    the problems found (every missing, unexpected or unusable tensor)."""
    values = {k: _as_float(k, v) for k, v in state.items()}
    scales = {}
    for key in list(values):
        for suffix in SCALE_SUFFIXES:
            if key.endswith(suffix):
                scales[key[:-len(suffix)] + ".weight"] = (key, values.pop(key))
    problems = []
    missing = sorted(set(NAMES) - set(values))
    unexpected = sorted(set(values) - set(NAMES))
    if missing:
        problems.append(f"missing tensors {missing}")
    if unexpected:
        problems.append(f"unexpected tensors {unexpected}")
    out = {}
    for name in sorted(set(NAMES) & set(values)):
        value, scale = values[name], scales.pop(name, None)
        if isinstance(value, _Fp8):
            if scale is None:
                problems.append(f"{name} is float8_e4m3fn but has no {name[:-len('.weight')]}.scale")
                continue
            if value.values.ndim != 2:
                problems.append(f"{name} is float8_e4m3fn with shape {list(value.shape)}, expected 2-D")
                continue
            value = _dequantise(name, value, np.asarray(scale[1], np.float32))
        elif scale is not None:
            problems.append(f"{scale[0]} given for {name}, which is not float8_e4m3fn")
            continue
        out[name] = value
    if scales:
        problems.append(f"scales without their FP8 weight {sorted(k for k, _ in scales.values())}")
    return out, problems


def _param(layer: object, path: str) -> object:
    cell, attr = path.split(".")
    return getattr(getattr(layer, cell), attr)


def expected_shapes(layer: object) -> dict[str, tuple[int, ...]]:
    """The shape of each DeepSeek tensor for ``layer`` (a ``DSAttention``)."""
    shapes = {name: tuple(_param(layer, path).shape) for name, path in NAMES.items() if path}
    h, nope, c = layer.w_uk.shape
    shapes["wkv_b.weight"] = (h * (nope + layer.w_uv.shape[1]), c)
    return shapes


def load(layer: object, state: Mapping[str, object] | str | os.PathLike, prefix: str = "") -> None:
    """Sets ``layer``'s parameters from DeepSeek-named tensors (see the module docstring)."""
    from mindspore import Tensor

    if isinstance(state, (str, os.PathLike)):
        state = read_safetensors(state, prefix)
    else:
        state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    values, problems = _floats(state)
    shapes = expected_shapes(layer)
    wrong = [f"{k} (expected {list(shapes[k])}, got {list(v.shape)})" for k, v in values.items()
             if tuple(v.shape) != shapes[k]]
    if wrong:
        problems.append("wrong shapes: " + ", ".join(wrong))
    if problems:
        raise ValueError("DSAttention.load_deepseek_state_dict: " + "; ".join(problems))
    for name, path in NAMES.items():
        if path:
            _param(layer, path).set_data(Tensor(values[name]))
    # wkv_b [H * (nope + v), C] is, per head, the rows of k_nope (w_uk) then those of v (w_uv).
    h, nope, c = layer.w_uk.shape
    per_head = values["wkv_b.weight"].reshape(h, -1, c)
    layer.w_uk.set_data(Tensor(np.ascontiguousarray(per_head[:, :nope])))
    layer.w_uv.set_data(Tensor(np.ascontiguousarray(per_head[:, nope:])))


def state_dict(layer: object, prefix: str = "") -> dict[str, np.ndarray]:
    """``layer``'s parameters as float32 NumPy arrays under DeepSeek's names (``prefix`` prepended)."""
    out = {name: _param(layer, path).asnumpy() for name, path in NAMES.items() if path}
    h, _, c = layer.w_uk.shape
    out["wkv_b.weight"] = np.concatenate((layer.w_uk.asnumpy(), layer.w_uv.asnumpy()), 1).reshape(-1, c)
    return {prefix + name: out[name] for name in NAMES}
