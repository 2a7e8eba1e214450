"""DeepSeek-V3.2's Hugging Face release: what DeepSeek publishes (``deepseek-ai/DeepSeek-V3.2``,
``-V3.2-Exp``): a folder with ``config.json`` in Hugging Face keys (``"model_type": "deepseek_v32"``),
``model.safetensors.index.json`` mapping every tensor to one of many shards, and Hugging Face tensor
names (``model.layers.N.self_attn.q_a_proj.weight``, FP8 weights with ``<name>.weight_scale_inv``).

This module knows that format only: the config mapped to DeepSeek's ``ModelArgs`` (the names of
their ``inference/model.py``, which ``deepseek_io`` turns into ``DSAttention`` arguments), the
tensor names mapped to those of their ``MLA`` module as their ``inference/convert.py`` does, and a
layer's tensors found through the index, reading the headers of the shards that hold them and
nothing else.

Config mapping (Hugging Face -> ModelArgs): ``hidden_size`` -> ``dim``, ``num_attention_heads`` ->
``n_heads``; ``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``,
``v_head_dim``, ``index_n_heads``, ``index_head_dim``, ``index_topk``, ``rope_theta`` keep their names;
``rope_scaling`` (``type``/``rope_type`` "yarn"; or transformers 5's ``rope_parameters``, which
also holds ``rope_theta``): ``factor`` -> ``rope_factor``,
``original_max_position_embeddings`` -> ``original_seq_len``, ``beta_fast``, ``beta_slow``, and
``mscale_all_dim`` -> ``mscale`` (the factor of the softmax scale: DeepSeek's ``MLA`` squares
``0.1 * mscale * ln(factor) + 1`` where Hugging Face's code uses ``mscale_all_dim``; Hugging Face's
``mscale`` only rescales cos/sin by ``get_mscale(mscale) / get_mscale(mscale_all_dim)``, which
DeepSeek's code does not do, so the two must be equal, as they are (1.0) in the release).
``max_position_embeddings`` is not used: DeepSeek's inference never reads it (their
``config_671B_v3.2.json`` has no ``max_seq_len``, so ``ModelArgs``' default 16384 sets the rope
tables, and YaRN is on because 16384 > 4096). ``rms_norm_eps`` is returned apart (``ModelArgs`` has
no epsilon; their norms use 1e-6, the release's value).
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

from . import _safetensors

MODEL_TYPE = "deepseek_v32"
CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
FP8_BLOCK = [128, 128]

# Hugging Face keys that become ModelArgs fields of the same meaning.
_SAME = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "index_n_heads",
         "index_head_dim", "index_topk")
_RENAMED = {"hidden_size": "dim", "num_attention_heads": "n_heads"}
# rope_scaling keys -> ModelArgs fields; beta_fast/beta_slow default to Hugging Face's YaRN defaults.
_YARN = {"factor": "rope_factor", "original_max_position_embeddings": "original_seq_len"}
_YARN_DEFAULTS = {"beta_fast": 32, "beta_slow": 1}

# Hugging Face module under ``model.layers.N.self_attn.`` -> DeepSeek's (convert.py's mapping; the
# indexer's modules have the same names in both). FP8 scales: ``weight_scale_inv`` -> ``scale``.
MODULES = {"q_a_proj": "wq_a", "q_a_layernorm": "q_norm", "q_b_proj": "wq_b", "kv_a_proj_with_mqa": "wkv_a",
           "kv_a_layernorm": "kv_norm", "kv_b_proj": "wkv_b", "o_proj": "wo"}
_DEEPSEEK_MODULES = {v: k for k, v in MODULES.items()}
HF_SCALE, SCALE = "weight_scale_inv", "scale"
_LAYER = re.compile(r"model\.layers\.(\d+)\.")


def layer_prefix(layer: int) -> str:
    """The names of layer ``layer``'s attention tensors start with this."""
    return f"model.layers.{layer}.self_attn."


def read_config(folder: str | os.PathLike, caller: str) -> dict[str, Any]:
    """The release's ``config.json``; a ``model_type`` other than DeepSeek-V3.2's is a ``ValueError``."""
    path = os.path.join(folder, CONFIG)
    if not os.path.isfile(path):
        raise ValueError(f"{caller}: {path} not found (a Hugging Face release folder has its config.json)")
    with open(path) as f:
        config = json.load(f)
    if not isinstance(config, dict) or config.get("model_type") != MODEL_TYPE:
        found = config.get("model_type") if isinstance(config, dict) else type(config).__name__
        raise ValueError(f"{caller}: {path} has model_type {found!r}, expected {MODEL_TYPE!r} (DeepSeek-V3.2)")
    return config


def model_args(config: Mapping[str, Any], source: str, caller: str) -> tuple[dict[str, Any], float, bool]:
    """``(ModelArgs, eps, yarn)`` for a Hugging Face DeepSeek-V3.2 config (see the module docstring);
    ``yarn`` says whether the config asks for YaRN. ``source`` names the config in messages."""
    missing = [k for k in (*_RENAMED, *_SAME) if config.get(k) is None]
    if missing:
        raise ValueError(f"{caller}: {source} lacks {missing}")
    if config.get("attention_bias"):
        raise ValueError(f"{caller}: {source} has attention_bias true; DeepSeek-V3.2's projections have no bias")
    if config.get("rope_interleave") is False or config.get("indexer_rope_interleave"):
        raise ValueError(f"{caller}: {source} has rope_interleave {config.get('rope_interleave')}, "
                         f"indexer_rope_interleave {config.get('indexer_rope_interleave')}; DeepSeek-V3.2 rotates "
                         "MLA's rope interleaved and the indexer's rotate-half, as DSAttention does")
    quant = config.get("quantization_config")
    if quant is not None and (quant.get("quant_method") != "fp8" or quant.get("weight_block_size") != FP8_BLOCK):
        raise ValueError(f"{caller}: {source} has quantization_config quant_method {quant.get('quant_method')!r}, "
                         f"weight_block_size {quant.get('weight_block_size')}; only fp8 in {FP8_BLOCK} blocks "
                         "(DeepSeek's) is read")
    args = {**{v: config[k] for k, v in _RENAMED.items()}, **{k: config[k] for k in _SAME}}
    rope = config.get("rope_scaling") or config.get("rope_parameters") or {}
    args["rope_theta"] = rope.get("rope_theta", config.get("rope_theta", 10000.0))
    kind = rope.get("type", rope.get("rope_type", "default"))
    if kind not in ("yarn", "default"):
        raise ValueError(f"{caller}: {source} has rope_scaling type {kind!r}; DeepSeek-V3.2 uses 'yarn' (or none)")
    if kind == "yarn":
        absent = [k for k in _YARN if rope.get(k) is None]
        if absent:
            raise ValueError(f"{caller}: {source}'s rope_scaling (yarn) lacks {absent}")
        args.update({v: rope[k] for k, v in _YARN.items()})
        args.update({k: rope.get(k, d) for k, d in _YARN_DEFAULTS.items()})
        scales = {k: rope[k] for k in ("mscale", "mscale_all_dim") if rope.get(k) is not None}
        if len(set(scales.values())) > 1:
            raise ValueError(f"{caller}: {source}'s rope_scaling has mscale {scales['mscale']} != mscale_all_dim "
                             f"{scales['mscale_all_dim']}: Hugging Face's code would scale cos/sin by their ratio, "
                             "DeepSeek's does not (it has one mscale, the softmax scale's)")
        args["mscale"] = scales.get("mscale_all_dim", scales.get("mscale", 1.0))
    return args, float(config.get("rms_norm_eps", 1e-6)), kind == "yarn"


# -- tensor names -----------------------------------------------------------------------------------

def to_deepseek(name: str) -> str:
    """A Hugging Face name (after the layer's prefix) as DeepSeek's; other names unchanged."""
    module, dot, leaf = name.rpartition(".")
    return f"{MODULES.get(module, module)}.{SCALE if leaf == HF_SCALE else leaf}" if dot else name


def to_hugging_face(name: str) -> str:
    """The inverse of :func:`to_deepseek` on DeepSeek's names."""
    module, dot, leaf = name.rpartition(".")
    return f"{_DEEPSEEK_MODULES.get(module, module)}.{HF_SCALE if leaf == SCALE else leaf}" if dot else name


def is_hugging_face(names: object) -> bool:
    """Whether any of ``names`` (after the prefix) is a Hugging Face module name."""
    return any(name.rpartition(".")[0] in MODULES for name in names)


# -- the release folder -----------------------------------------------------------------------------

def _layers(names: object) -> str:
    """The layer numbers in ``names`` as ranges, e.g. "0-60" (for messages)."""
    found = sorted({int(m.group(1)) for n in names if (m := _LAYER.match(n))})
    runs, start = [], None
    for i, n in enumerate(found):
        start = n if start is None else start
        if i + 1 == len(found) or found[i + 1] != n + 1:
            runs.append(f"{start}-{n}" if n > start else f"{start}")
            start = None
    return ", ".join(runs) or "none"


def weight_map(folder: str | os.PathLike, caller: str) -> tuple[dict[str, str], str]:
    """Tensor name -> shard file name of the release, and the file that says so (its index, or its
    one ``model.safetensors``, whose header is read)."""
    index = os.path.join(folder, INDEX)
    if os.path.isfile(index):
        with open(index) as f:
            table = json.load(f)
        mapping = table.get("weight_map") if isinstance(table, dict) else None
        if not isinstance(mapping, dict):
            raise ValueError(f"{caller}: {index} has no \"weight_map\" object")
        return mapping, index
    single = os.path.join(folder, SINGLE_FILE)
    if os.path.isfile(single):
        return dict.fromkeys(_safetensors.entries(single), SINGLE_FILE), single
    raise ValueError(f"{caller}: {folder} has neither {INDEX} nor {SINGLE_FILE}")


def entries(folder: str | os.PathLike, prefix: str, caller: str) -> dict[str, _safetensors.Entry]:
    """The tensors under ``prefix`` by their name after it, unread, found through the index: only the
    headers of the shards holding them are read. A prefix with no tensor is a ``ValueError`` naming
    the layer and the layers the release has."""
    folder = os.fspath(folder)
    if not prefix:
        raise ValueError(f"{caller}: a release folder needs a prefix such as {layer_prefix(0)!r} "
                         "(one layer's tensors, not the whole model)")
    mapping, source = weight_map(folder, caller)
    wanted = {name: shard for name, shard in mapping.items() if name.startswith(prefix)}
    if not wanted:
        m = re.fullmatch(r"model\.layers\.(\d+)\.self_attn\.", prefix)
        what = f"layer {m.group(1)} is not in the release: " if m else ""
        raise ValueError(f"{caller}: {what}{source} lists no tensor under {prefix!r} "
                         f"(its layers: {_layers(mapping)})")
    out, by_shard = {}, {}
    for name, shard in wanted.items():
        by_shard.setdefault(shard, []).append(name)
    for shard, names in sorted(by_shard.items()):
        path = os.path.join(folder, shard)
        if not os.path.isfile(path):
            raise ValueError(f"{caller}: {source} puts {names[0]} in {shard}, which {folder} does not have")
        header = _safetensors.entries(path)
        absent = sorted(set(names) - set(header))
        if absent:
            raise ValueError(f"{caller}: {source} puts {absent} in {path}, whose header does not list them")
        out.update({name[len(prefix):]: header[name] for name in names})
    return out
