"""Load one attention layer straight from DeepSeek-V3.2's Hugging Face release with
``nn.DSAttention.from_pretrained``: the release folder's ``config.json``, its
``model.safetensors.index.json`` and only the shards holding that layer's attention tensors.

    python examples/hf_release_layer.py                                  # a synthetic release, layer 1
    python examples/hf_release_layer.py --release /data/DeepSeek-V3.2 --layer 3 --seq 64

Without ``--release`` it writes a small synthetic release in a temporary folder, shaped as DeepSeek's
(their config keys; four shards; FP8 linear weights with ``weight_scale_inv`` blocks, bfloat16 norms
and ``weights_proj``, float32 indexer LayerNorm; other layers' attention, norms, MLP, embedding and
head tensors beside them (256 experts per MoE layer), the large ones left as holes in the files, so
that the release is over a GiB on paper and costs no disk), loads layer 1, checks it bitwise against
the same weights given under DeepSeek's inference names (``from_deepseek`` with their ``ModelArgs`` +
``load_deepseek_state_dict``), runs a forward through both, and prints the peak resident memory the
load added. The writer here is also what the tests build their releases with.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

# A small DeepSeek-V3.2 config in Hugging Face keys (the release's keys and structure; sizes shrunk:
# hidden_size 160 gives partial 128-blocks). mscale 0.707 and rope_theta 50000 differ from DeepSeek's
# defaults so that a lost mapping shows.
CONFIG = {
    "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32", "hidden_size": 160,
    "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 24, "kv_lora_rank": 16,
    "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 12, "index_n_heads": 8, "index_head_dim": 16,
    "index_topk": 5, "num_hidden_layers": 3, "first_k_dense_replace": 1, "intermediate_size": 18432,
    "n_routed_experts": 256, "n_shared_experts": 1, "moe_intermediate_size": 4096, "vocab_size": 129280,
    "max_position_embeddings": 163840, "rms_norm_eps": 1e-6, "rope_theta": 50000,
    "attention_bias": False, "torch_dtype": "bfloat16",
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 64, "beta_fast": 32,
                     "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707},
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "scale_fmt": "ue8m0", "weight_block_size": [128, 128]},
}
# DeepSeek-V3.2's own release config (deepseek-ai/DeepSeek-V3.2, config.json), its attention keys and a
# few others: the sizes of the real layer.
DEEPSEEK_V32 = {
    "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32", "hidden_size": 7168,
    "num_attention_heads": 128, "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "index_n_heads": 64, "index_head_dim": 128,
    "index_topk": 2048, "num_hidden_layers": 61, "first_k_dense_replace": 3, "intermediate_size": 18432,
    "n_routed_experts": 256, "n_shared_experts": 1, "moe_intermediate_size": 2048, "vocab_size": 129280,
    "max_position_embeddings": 163840, "rms_norm_eps": 1e-6, "rope_theta": 10000, "attention_bias": False,
    "torch_dtype": "bfloat16",
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "scale_fmt": "ue8m0", "weight_block_size": [128, 128]},
}
# The same layer in DeepSeek's inference ModelArgs names (what their convert.py + config_*.json give);
# max_seq_len is left to ModelArgs' default (16384), as their config_671B_v3.2.json leaves it.
MODEL_ARGS = {"dim": 160, "n_heads": 4, "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
              "qk_rope_head_dim": 8, "v_head_dim": 12, "index_n_heads": 8, "index_head_dim": 16, "index_topk": 5,
              "rope_theta": 50000.0, "original_seq_len": 64, "rope_factor": 40, "beta_fast": 32, "beta_slow": 1,
              "mscale": 0.707}
# Hugging Face attention tensor names (after "model.layers.N.self_attn.") -> DeepSeek's inference names.
HF_TO_DEEPSEEK = {
    "q_a_proj.weight": "wq_a.weight", "q_a_layernorm.weight": "q_norm.weight", "q_b_proj.weight": "wq_b.weight",
    "kv_a_proj_with_mqa.weight": "wkv_a.weight", "kv_a_layernorm.weight": "kv_norm.weight",
    "kv_b_proj.weight": "wkv_b.weight", "o_proj.weight": "wo.weight", "indexer.wq_b.weight": "indexer.wq_b.weight",
    "indexer.wk.weight": "indexer.wk.weight", "indexer.k_norm.weight": "indexer.k_norm.weight",
    "indexer.k_norm.bias": "indexer.k_norm.bias", "indexer.weights_proj.weight": "indexer.weights_proj.weight",
}
BLOCK = 128


class Hole(NamedTuple):
    """A tensor listed in a shard's header whose bytes are a hole in the file (reads as zeros)."""

    dtype: str
    shape: tuple


def attention_shapes(c: dict) -> dict[str, tuple]:
    """Each attention tensor's shape for the Hugging Face config ``c`` (Linear weights [out, in])."""
    h, q, kv, nope, rope, v = (c[k] for k in ("num_attention_heads", "q_lora_rank", "kv_lora_rank",
                                              "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
    dim, ih, idim = c["hidden_size"], c["index_n_heads"], c["index_head_dim"]
    return {"q_a_proj.weight": (q, dim), "q_a_layernorm.weight": (q,), "q_b_proj.weight": (h * (nope + rope), q),
            "kv_a_proj_with_mqa.weight": (kv + rope, dim), "kv_a_layernorm.weight": (kv,),
            "kv_b_proj.weight": (h * (nope + v), kv), "o_proj.weight": (dim, h * v),
            "indexer.wq_b.weight": (ih * idim, q), "indexer.wk.weight": (idim, dim),
            "indexer.k_norm.weight": (idim,), "indexer.k_norm.bias": (idim,), "indexer.weights_proj.weight": (ih, dim)}


def _fp8(rng: np.random.Generator, shape: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Random float8_e4m3fn bytes and their values (float64), built from their fields: exponents
    0..9 (0 = subnormals), so values up to ~7.5 in magnitude; NaN (0x7f/0xff) cannot occur."""
    sign, exp, man = rng.integers(0, 2, shape), rng.integers(0, 10, shape), rng.integers(0, 8, shape)
    value = np.where(exp == 0, man / 8 * 2.0 ** -6, (1 + man / 8) * 2.0 ** (exp - 7.0)) * (1 - 2 * sign)
    return ((sign << 7) | (exp << 3) | man).astype(np.uint8), value


def _bf16(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """bfloat16 bits (the top half of float32, truncated) and the values they hold (float64)."""
    bits = (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def attention_tensors(c: dict, rng: np.random.Generator, fp8: bool
                      ) -> tuple[dict[str, tuple[str, np.ndarray]], dict[str, np.ndarray]]:
    """One layer's attention tensors under Hugging Face names as ``(safetensors dtype, raw array)``,
    and their float32 values under DeepSeek's names (FP8 weights times their block factors).

    ``fp8``: as DeepSeek's release (FP8 matrices with float32 ``weight_scale_inv`` per 128 x 128
    block, bfloat16 RMSNorm weights and ``weights_proj``, float32 indexer LayerNorm); otherwise a
    bfloat16 release with float16 and float32 tensors among them."""
    tensors, values = {}, {}
    for name, shape in attention_shapes(c).items():
        if len(shape) == 2 and fp8 and name != "indexer.weights_proj.weight":
            raw, val = _fp8(rng, shape)
            blocks = (-(-shape[0] // BLOCK), -(-shape[1] // BLOCK))
            scale = (rng.uniform(0.5, 2.0, blocks) * 0.25 / math.sqrt(shape[1])).astype(np.float32)
            tensors[name] = ("F8_E4M3", raw)
            tensors[name[:-len("weight")] + "weight_scale_inv"] = ("F32", scale)
            val = val * np.repeat(np.repeat(scale.astype(np.float64), BLOCK, 0), BLOCK, 1)[:shape[0], :shape[1]]
        elif len(shape) == 2:
            raw, val = _bf16(rng.standard_normal(shape) / math.sqrt(shape[1]))
            tensors[name] = ("BF16", raw)
        else:
            full = (0.1 if name.endswith("bias") else 1.0) + 0.1 * rng.standard_normal(shape)
            if name.startswith("indexer.k_norm"):          # float32 in DeepSeek's release
                raw = val = full.astype(np.float32)
                tensors[name] = ("F32", raw)
            elif name == "q_a_layernorm.weight" and not fp8:
                raw = val = full.astype(np.float16)
                tensors[name] = ("F16", raw)
            else:
                raw, val = _bf16(full)
                tensors[name] = ("BF16", raw)
        values[HF_TO_DEEPSEEK[name]] = np.asarray(val, np.float64).astype(np.float32)
    return tensors, values


_WIDTH = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, np.ndarray] | Hole]) -> None:
    """A safetensors file written by hand (the ``safetensors`` package cannot write bfloat16 or float8
    from NumPy): name -> (dtype tag, raw little-endian array) or :class:`Hole`, whose bytes are left
    as a hole at the end of the file (a sparse file: listed, never written)."""
    real = {k: v for k, v in tensors.items() if not isinstance(v, Hole)}
    holes = {k: v for k, v in tensors.items() if isinstance(v, Hole)}
    header, blobs, offset = {}, [], 0
    for name, (tag, raw) in real.items():
        data = np.ascontiguousarray(raw).tobytes()
        header[name] = {"dtype": tag, "shape": list(raw.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    for name, (tag, shape) in holes.items():
        size = _WIDTH[tag] * math.prod(shape)
        header[name] = {"dtype": tag, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    head = json.dumps({"__metadata__": {"format": "pt"}, **header}).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(len(head).to_bytes(8, "little") + head + b"".join(blobs))
        f.truncate(8 + len(head) + offset)


def write_release(folder: Path, config: dict, shards: dict[str, dict[str, tuple[str, np.ndarray] | Hole]]) -> None:
    """A Hugging Face release: ``config.json``, ``model.safetensors.index.json`` and the shards."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    weight_map = {name: shard for shard, tensors in shards.items() for name in tensors}
    for shard, tensors in shards.items():
        write_safetensors(folder / shard, tensors)
    size = sum((folder / shard).stat().st_size for shard in shards)
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": size}, "weight_map": weight_map}, indent=2))


def synthetic_release(folder: Path, fp8: bool = True, seed: int = 0, layer: int = 1,
                      edit: Callable[[dict], None] | None = None) -> dict[str, np.ndarray]:
    """Writes a release of ``CONFIG`` with 3 layers in 4 shards and returns layer ``layer``'s
    attention weights in float32 under DeepSeek's names. Layer ``layer``'s tensors are split over
    shards 2 and 3 (its ``q_a_proj.weight_scale_inv`` apart from its weight); shard 1 holds the
    embedding and layer 0, shard 4 the last layers and the head, so loading layer 1 never needs
    them; the MLP (dense in layer 0, 256 experts after), embedding and head weights are holes
    (together over 1 GiB). ``edit`` may change
    the ``{shard: {name: tensor}}`` table before it is written (the tests break releases so)."""
    rng = np.random.default_rng(seed)
    c = CONFIG

    def mlp(module: str, inter: int) -> dict[str, Hole]:
        return {f"{module}.{p}.weight": Hole("F8_E4M3", (c["hidden_size"], inter) if p == "down_proj" else
                                             (inter, c["hidden_size"])) for p in ("gate_proj", "up_proj", "down_proj")}

    shards: dict[str, dict] = {f"model-0000{i}-of-00004.safetensors": {} for i in range(1, 5)}
    names = list(shards)
    shards[names[0]]["model.embed_tokens.weight"] = Hole("BF16", (c["vocab_size"], c["hidden_size"]))
    shards[names[3]]["lm_head.weight"] = Hole("BF16", (c["vocab_size"], c["hidden_size"]))
    shards[names[3]]["model.norm.weight"] = ("BF16", _bf16(np.ones(c["hidden_size"]))[0])
    out = {}
    for n in range(c["num_hidden_layers"]):
        tensors, values = attention_tensors(c, rng, fp8)
        home = 0 if n < layer else (3 if n > layer else 1)
        pre = f"model.layers.{n}."
        for i, (name, value) in enumerate(tensors.items()):
            split = 1 if n == layer and i >= len(tensors) // 2 else 0      # layer's tensors over two shards
            if n == layer and name == "q_a_proj.weight_scale_inv":
                split = 1                                                  # a factor apart from its weight
            shards[names[home + split]][pre + "self_attn." + name] = value
        norm = ("BF16", _bf16(np.ones(c["hidden_size"]))[0])
        shards[names[home]].update({pre + "input_layernorm.weight": norm,
                                    pre + "post_attention_layernorm.weight": norm})
        if n < c["first_k_dense_replace"]:
            shards[names[home]].update({pre + k: v for k, v in mlp("mlp", c["intermediate_size"]).items()})
        else:                       # MoE: the router, the shared expert, the routed experts (split over two shards)
            shards[names[home]][pre + "mlp.gate.weight"] = Hole("BF16", (c["n_routed_experts"], c["hidden_size"]))
            for e in ("shared_experts", *(f"experts.{i}" for i in range(c["n_routed_experts"]))):
                part = 1 if n == layer and e.startswith("experts.") and int(e[8:]) % 2 else 0
                shards[names[home + part]].update(
                    {pre + k: v for k, v in mlp("mlp." + e, c["moe_intermediate_size"]).items()})
        if n == layer:
            out = values
    if edit is not None:
        edit(shards)
    write_release(folder, c, shards)
    return out


def _peak_growth(fn: object) -> tuple[object, int | None]:
    """``fn()`` and the peak resident memory it added, in bytes (Linux; None elsewhere)."""
    status = Path("/proc/self/status")

    def field(name: str) -> int:
        return next(int(line.split()[1]) * 1024 for line in status.read_text().splitlines()
                    if line.startswith(name + ":"))

    if not status.exists():
        return fn(), None
    before = field("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")      # resets the high-water mark VmHWM
    result = fn()
    return result, field("VmHWM") - before


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", help="a Hugging Face release folder (default: write a synthetic one)")
    parser.add_argument("--layer", type=int, default=1)
    parser.add_argument("--seq", type=int, default=16, help="tokens of the random input run through the layer")
    args = parser.parse_args(argv)

    import mindspore as ms
    from mindspore import Tensor

    import ms_grad_ops as mgo

    ms.set_context(mode=ms.PYNATIVE_MODE)
    with tempfile.TemporaryDirectory() as tmp:
        release = Path(args.release or Path(tmp) / "DeepSeek-V3.2-synthetic")
        weights = None if args.release else synthetic_release(release, layer=args.layer)
        on_disk = sum(os.stat(p).st_blocks * 512 for p in release.iterdir())
        listed = json.loads((release / "model.safetensors.index.json").read_text())["metadata"].get("total_size")
        attn, grown = _peak_growth(lambda: mgo.nn.DSAttention.from_pretrained(release, layer=args.layer))
        params = sum(p.size for p in attn.trainable_params()) * 4
        print(f"release {release}: {listed} bytes listed, {on_disk} on disk; layer {args.layer}: "
              f"{params} bytes of float32 parameters; from_pretrained added a peak of "
              f"{'n/a' if grown is None else grown} bytes of resident memory")
        rng = np.random.default_rng(1)
        x = Tensor(rng.standard_normal((1, args.seq, attn.wq_a.weight.shape[1])).astype(np.float32))
        out, loss = attn(x)
        print(f"forward: out {out.shape}, |out| mean {np.abs(out.asnumpy()).mean():.4g}, indexer loss "
              f"{float(loss.asnumpy()[0]):.4g}")
        if weights is None:
            return 0
        ref = mgo.nn.DSAttention.from_deepseek(MODEL_ARGS)
        ref.load_deepseek_state_dict({f"layers.{args.layer}.attn.{k}": v for k, v in weights.items()},
                                     prefix=f"layers.{args.layer}.attn.")
        same = all(np.array_equal(p.asnumpy().view(np.uint32), q.asnumpy().view(np.uint32))
                   for p, q in zip(attn.trainable_params(), ref.trainable_params()))
        same_out = np.array_equal(out.asnumpy(), ref(x)[0].asnumpy())
        print(f"against from_deepseek + load_deepseek_state_dict (DeepSeek's names, float32): parameters "
              f"{'bitwise equal' if same else 'DIFFER'}, output {'equal' if same_out else 'DIFFERS'}")
        return 0 if same and same_out else 1


if __name__ == "__main__":
    raise SystemExit(main())
