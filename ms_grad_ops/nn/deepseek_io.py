"""DeepSeek-V3.2 interchange for ``nn.DSAttention``: its ``ModelArgs`` (a dict or ``config.json``)
and one attention layer's tensors under the names of DeepSeek's ``inference/model.py`` (module
``MLA``: ``wq_a.weight``, ``q_norm.weight``, ..., ``indexer.weights_proj.weight``) or under Hugging
Face's (``q_a_proj.weight``, ...: ``hf_release``), as NumPy arrays, from a safetensors file or from a
Hugging Face release folder (``_safetensors`` reads them with NumPy, only the tensors needed).

FP8 checkpoints: a ``float8_e4m3fn`` weight comes with float32 block factors of shape
``[ceil(out / 128), ceil(in / 128)]``, named ``<name>.scale`` by DeepSeek's ``convert.py`` and
``<name>.weight_scale_inv`` in the Hugging Face release. Both *multiply*: ``convert.py`` only renames
``weight_scale_inv`` to ``scale`` (values untouched), and their ``weight_dequant`` and ``fp8_gemm``
compute ``weight * scale`` per 128 x 128 block (the "inv" is the inverse of the quantisation
divisor). That product, in float32, is the value loaded.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import _safetensors, _yarn, hf_release
from ._safetensors import Entry, Fp8

FP8_BLOCK = 128
LOAD = "DSAttention.load_deepseek_state_dict"
FROM_DEEPSEEK = "DSAttention.from_deepseek"
FROM_PRETRAINED = "DSAttention.from_pretrained"

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
SCALE = ".scale"
# DeepSeek-V4's per-head sink logits, held by a DSAttention(attn_sink=True) only.
SINK = "attn_sink"


def names(layer: object) -> dict[str, str | None]:
    """``NAMES`` of ``layer``, with ``attn_sink`` when it has sinks."""
    return {**NAMES, **({SINK: SINK} if getattr(layer, SINK, None) is not None else {})}


def model_args(args: object, caller: str = FROM_DEEPSEEK) -> dict[str, Any]:
    """DeepSeek's ``ModelArgs`` as a dict with its defaults filled in, from a mapping, a path to a
    ``config.json`` or an object with those attributes; unknown names are a ``ValueError``."""
    if isinstance(args, (str, os.PathLike)):
        with open(args) as f:
            args = json.load(f)
    elif not isinstance(args, Mapping):
        args = dict(vars(args))
    unknown = sorted(set(args) - set(MODEL_ARGS))
    if unknown:
        raise ValueError(f"{caller}: unknown ModelArgs names {unknown}")
    merged = {**MODEL_ARGS, **args}
    if not merged["q_lora_rank"]:
        raise ValueError(f"{caller}: q_lora_rank must be > 0 (V3.2's indexer reads the query "
                         f"latent), got {merged['q_lora_rank']}")
    return merged


def layer_kwargs(args: object, caller: str = FROM_DEEPSEEK) -> dict[str, Any]:
    """The ``DSAttention`` constructor arguments for DeepSeek ``args`` (see :func:`model_args`)."""
    merged = model_args(args, caller)
    return {k: merged[k] for k in LAYER_ARGS}


# -- the layer from a Hugging Face release ------------------------------------------------------------

def pretrained_kwargs(folder: str | os.PathLike, overrides: Mapping[str, object]) -> dict[str, Any]:
    """The ``DSAttention`` arguments for the release's ``config.json`` (mapped by ``hf_release``
    through ``ModelArgs``, so ``max_seq_len`` is ModelArgs' 16384 unless ``overrides`` set it), then
    ``overrides``. Without ``rope_scaling`` YaRN stays off at any ``max_seq_len``; with it, a
    ``max_seq_len`` at or below ``original_max_position_embeddings`` is an error, because DeepSeek's
    code turns YaRN off there and the layer would not be the release's."""
    source = os.path.join(folder, hf_release.CONFIG)
    args, eps, yarn = hf_release.model_args(hf_release.read_config(folder, FROM_PRETRAINED), source, FROM_PRETRAINED)
    kwargs = {**layer_kwargs(args, FROM_PRETRAINED), "eps": eps, **overrides}
    if not yarn and "original_seq_len" not in overrides:
        kwargs["original_seq_len"] = kwargs["max_seq_len"]
    elif yarn and kwargs["max_seq_len"] <= kwargs["original_seq_len"]:
        raise ValueError(f"{FROM_PRETRAINED}: max_seq_len {kwargs['max_seq_len']} <= original_seq_len "
                         f"{kwargs['original_seq_len']} turns YaRN off (DeepSeek's rule), but {source} asks for "
                         "YaRN; pass a larger max_seq_len (from_deepseek builds a layer without YaRN)")
    return kwargs


def from_pretrained(cls: type, folder: str | os.PathLike, layer: int, overrides: Mapping[str, object]) -> object:
    """Layer ``layer``'s attention of the release in ``folder``, built as :func:`pretrained_kwargs`
    says and loaded from the shards holding its tensors (see ``DSAttention.from_pretrained``)."""
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or layer < 0:
        raise ValueError(f"{FROM_PRETRAINED}: layer must be an int >= 0, got {layer!r}")
    if not os.path.isdir(folder):
        raise ValueError(f"{FROM_PRETRAINED}: {folder} is not a folder (a Hugging Face release: config.json, "
                         f"{hf_release.INDEX} and its shards)")
    kwargs = pretrained_kwargs(folder, overrides)
    prefix = hf_release.layer_prefix(int(layer))
    state = hf_release.entries(folder, prefix, FROM_PRETRAINED)
    attn = cls(**kwargs)
    _load(attn, state, prefix, FROM_PRETRAINED, hugging_face=True, files=True)
    return attn


# -- tensors -----------------------------------------------------------------------------------------

def _kind(label: str, value: object) -> str:
    """"fp8", "float", or the problem with ``value``'s dtype; nothing is read (a file's tensor is
    judged by its header). An in-memory array of a non-float dtype is a ``TypeError``."""
    if isinstance(value, Entry):
        if value.dtype == _safetensors.FP8:
            return "fp8"
        return "float" if value.dtype in _safetensors.RAW else (
            f"{label} has dtype {value.dtype}, expected one of {sorted(_safetensors.RAW)}")
    if isinstance(value, Fp8):
        return "fp8"
    dtype = np.asarray(value).dtype
    if dtype.name == "float8_e4m3fn":
        return "fp8"
    if dtype.kind != "f" and dtype.name != "bfloat16":
        raise TypeError(f"{LOAD}: {label} has dtype {dtype}, expected a float dtype (or float8_e4m3fn with its "
                        ".scale)")
    return "float"


def _float(value: object) -> np.ndarray | Fp8:
    """A tensor given (array, file entry) as a fresh float32 array, float8_e4m3fn as :class:`Fp8`
    (ml_dtypes' float8_e4m3fn arrays included: torch's ``.numpy()`` of one cannot exist)."""
    if isinstance(value, Entry):
        return value.read()
    if isinstance(value, Fp8):
        return Fp8(value.values.astype(np.float32))
    arr = np.asarray(value)
    return Fp8(arr.astype(np.float32)) if arr.dtype.name == "float8_e4m3fn" else arr.astype(np.float32)


def _blocks(shape: tuple[int, ...]) -> tuple[int, int]:
    """The shape of the block factors of an FP8 weight of ``shape`` (128 x 128 blocks)."""
    return -(-shape[0] // FP8_BLOCK), -(-shape[1] // FP8_BLOCK)


def _dequantise(weight: Fp8, scale: np.ndarray) -> np.ndarray:
    """``weight * scale`` per 128 x 128 block (float32, in place on the decoded weight: one row of
    blocks at a time, so no second full-size array)."""
    values, cols = weight.values, weight.shape[1]
    for i in range(scale.shape[0]):
        values[i * FP8_BLOCK:(i + 1) * FP8_BLOCK] *= np.repeat(scale[i], FP8_BLOCK)[:cols]
    return values


def _param(layer: object, path: str) -> object:
    for attr in path.split("."):
        layer = getattr(layer, attr)
    return layer


def expected_shapes(layer: object) -> dict[str, tuple[int, ...]]:
    """The shape of each DeepSeek tensor for ``layer`` (a ``DSAttention``)."""
    shapes = {name: tuple(_param(layer, path).shape) for name, path in names(layer).items() if path}
    h, nope, c = layer.w_uk.shape
    shapes["wkv_b.weight"] = (h * (nope + layer.w_uv.shape[1]), c)
    return shapes


def _scale_problems(weight: str, shape: tuple[int, int], label: str, scale: object) -> list[str]:
    """What is wrong with ``scale``, the block factors of the FP8 weight ``weight`` of ``shape``."""
    kind, want = _kind(label, scale), _blocks(shape)
    if kind != "float":
        return [kind if kind != "fp8" else f"{label} is float8_e4m3fn"]
    if tuple(scale.shape) != want:
        return [f"the scale of {weight}, {label}, has shape {list(scale.shape)}, expected {list(want)} for a "
                f"{shape[0]} x {shape[1]} FP8 weight in {FP8_BLOCK} x {FP8_BLOCK} blocks"]
    return []


def _problems(tensors: Mapping[str, object], shapes: Mapping[str, tuple], label: Any) -> list[str]:
    """Every missing, unexpected, wrongly shaped or unusable tensor among ``tensors`` (DeepSeek's names,
    FP8 factors as ``<module>.scale``), found from names, shapes and dtypes alone."""
    weights = {k: v for k, v in tensors.items() if not k.endswith(SCALE)}
    scales = {k[:-len(SCALE)] + ".weight": k for k in tensors if k.endswith(SCALE)}
    problems, wrong = [], []
    missing, unexpected = sorted(set(shapes) - set(weights)), sorted(set(weights) - set(shapes))
    if missing:
        problems.append(f"missing tensors {[label(k) for k in missing]}")
    if unexpected:
        problems.append(f"unexpected tensors {[label(k) for k in unexpected]}")
    for name in sorted(set(shapes) & set(weights)):
        value, scale, kind = weights[name], scales.pop(name, None), _kind(label(name), weights[name])
        if tuple(value.shape) != shapes[name]:
            wrong.append(f"{label(name)} (expected {list(shapes[name])}, got {list(value.shape)})")
        if kind == "fp8" and len(shapes[name]) != 2:
            problems.append(f"{label(name)} is float8_e4m3fn, but only matrices come in FP8 blocks")
        elif kind == "fp8" and scale is None:
            problems.append(f"{label(name)} is float8_e4m3fn but has no {label(name[:-len('.weight')] + SCALE)}")
        elif kind == "fp8":
            problems += _scale_problems(label(name), shapes[name], label(scale), tensors[scale])
        elif kind != "float":
            problems.append(kind)
        elif scale is not None:
            problems.append(f"{label(scale)} given for {label(name)}, which is not float8_e4m3fn")
    if scales:
        problems.append(f"scales without their FP8 weight {sorted(label(k) for k in scales.values())}")
    if wrong:
        problems.append("wrong shapes: " + ", ".join(wrong))
    return problems


def _load(layer: object, state: Mapping[str, object], prefix: str, caller: str, hugging_face: bool,
          files: bool) -> None:
    """Sets ``layer``'s parameters from ``state`` (names after ``prefix``, DeepSeek's or Hugging
    Face's). Every problem is found before anything is read or set; then one tensor at a time is
    read, dequantised and set, so memory holds the layer and one tensor in flight."""
    tensors, given, twice = {}, {}, []
    for key, value in state.items():
        name = hf_release.to_deepseek(key)
        if name in tensors:
            twice.append(f"{given[name]} and {key}")
        tensors[name], given[name] = value, key

    def label(name: str) -> str:
        """The tensor as the caller named it (with its file for a release), for messages."""
        key = given.get(name, hf_release.to_hugging_face(name) if hugging_face else name)
        key = prefix + key if hugging_face else key
        value = tensors.get(name)
        return f"{key} in {value.path}" if files and isinstance(value, Entry) else key

    problems = ([f"tensors given twice, under two names: {twice}"] if twice else []) + _problems(
        tensors, expected_shapes(layer), label)
    if problems:
        raise ValueError(f"{caller}: " + "; ".join(problems))

    from mindspore import Tensor

    def value(name: str) -> np.ndarray:
        out = _float(tensors[name])
        if isinstance(out, Fp8):
            scale = _float(tensors[name[:-len(".weight")] + SCALE])
            out = _dequantise(out, np.asarray(scale, np.float32))
        return out

    # Tensor.from_numpy shares the array's memory: the arrays here are fresh, read or copied for this.
    for name, path in names(layer).items():
        if path:
            _param(layer, path).set_data(Tensor.from_numpy(value(name)))
    # wkv_b [H * (nope + v), C] is, per head, the rows of k_nope (w_uk) then those of v (w_uv).
    h, nope, c = layer.w_uk.shape
    per_head = value("wkv_b.weight").reshape(h, -1, c)
    layer.w_uk.set_data(Tensor.from_numpy(per_head[:, :nope].copy()))      # each its own buffer
    layer.w_uv.set_data(Tensor.from_numpy(per_head[:, nope:].copy()))


def load(layer: object, state: Mapping[str, object] | str | os.PathLike, prefix: str = "") -> None:
    """Sets ``layer``'s parameters from one layer's tensors under ``prefix``: a mapping, a safetensors
    file or a Hugging Face release folder (through its index; ``prefix`` such as
    ``"model.layers.3.self_attn."``), named as DeepSeek's ``MLA`` or as Hugging Face's release."""
    folder = isinstance(state, (str, os.PathLike)) and os.path.isdir(state)
    if folder:
        state = hf_release.entries(state, prefix, LOAD)
    elif isinstance(state, (str, os.PathLike)):
        state = {k[len(prefix):]: v for k, v in _safetensors.entries(state).items() if k.startswith(prefix)}
    else:
        state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    _load(layer, state, prefix, LOAD, folder or hf_release.is_hugging_face(state), folder)


def state_dict(layer: object, prefix: str = "") -> dict[str, np.ndarray]:
    """``layer``'s parameters as float32 NumPy arrays under DeepSeek's names (``prefix`` prepended)."""
    out = {name: _param(layer, path).asnumpy() for name, path in names(layer).items() if path}
    h, _, c = layer.w_uk.shape
    out["wkv_b.weight"] = np.concatenate((layer.w_uk.asnumpy(), layer.w_uv.asnumpy()), 1).reshape(-1, c)
    return {prefix + name: out[name] for name in names(layer)}
