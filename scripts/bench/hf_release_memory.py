"""What ``DSAttention.from_pretrained`` costs on a release much larger than one layer: peak resident
memory it adds, bytes it reads, wall time, at DeepSeek-V3.2's attention sizes.

Usage (inside the venv, from any directory; about a minute, ~0.2 GB of disk):
    python scripts/bench/hf_release_memory.py [--config deepseek|small]

The release (``examples/hf_release_layer.py``'s writer) has DeepSeek-V3.2's config.json and three
layers in four shards; layer 1's attention tensors are real (random FP8 bytes with float32
``weight_scale_inv`` blocks, bfloat16 norms and ``weights_proj``, float32 indexer LayerNorm); every
other tensor (layers 0 and 2, 256 experts of 2048 x 7168 per MoE layer, the dense MLP, embedding
and head) is a hole in its shard: listed at full size, never written. Each measurement is its own
process: it imports MindSpore and the package, builds a tiny layer (warm-up), then resets the
resident high-water mark (``/proc/self/clear_refs`` = 5) and either only constructs the layer
(``DSAttention(**arguments)``: its parameters, initialised) or runs ``from_pretrained`` (constructs
and loads); peak = ``VmHWM`` minus the resident size before; bytes read = the growth of
``/proc/self/io`` ``rchar`` (every byte ``read()`` returned, holes included).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import ROOT, spawn_json  # noqa: E402

BENCH = "hf_release_memory"
_spec = importlib.util.spec_from_file_location("hf_release_layer", ROOT / "examples" / "hf_release_layer.py")
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)
SMALL_SIZES = {"hidden_size": 2048, "num_attention_heads": 16, "q_lora_rank": 512, "index_n_heads": 16}


def _layer_tensors(c: dict, rng: np.random.Generator | None) -> dict[str, object]:
    """One layer's attention under Hugging Face names, in the dtypes of DeepSeek's release: FP8 bytes
    drawn directly (0x7f/0xff, NaN, avoided) with float32 block factors, bfloat16, float32; every
    tensor a hole when ``rng`` is None."""
    out = {}

    def put(name: str, tag: str, shape: tuple, make: object) -> None:
        out[name] = example.Hole(tag, shape) if rng is None else (tag, make(shape))

    for name, shape in example.attention_shapes(c).items():
        if len(shape) == 2 and name != "indexer.weights_proj.weight":
            blocks = (-(-shape[0] // 128), -(-shape[1] // 128))
            put(name, "F8_E4M3", shape, lambda s: _fp8_bytes(rng, s))
            put(name[:-len("weight")] + "weight_scale_inv", "F32", blocks,
                lambda s: rng.uniform(1e-4, 1e-3, s).astype(np.float32))
        elif name.startswith("indexer.k_norm"):
            put(name, "F32", shape, lambda s: np.ones(s, np.float32))
        else:
            put(name, "BF16", shape,
                lambda s: (rng.standard_normal(s).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16))
    return out


def _fp8_bytes(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    raw = rng.integers(0, 256, shape, dtype=np.uint8)
    raw[(raw & 0x7F) == 0x7F] -= 1
    return raw


def write(folder: Path, c: dict) -> None:
    """The release described in the module docstring."""
    rng, h = np.random.default_rng(0), c["hidden_size"]

    def mlp(module: str, inter: int) -> dict[str, object]:
        return {f"{module}.{p}.weight": example.Hole("F8_E4M3", (h, inter) if p == "down_proj" else (inter, h))
                for p in ("gate_proj", "up_proj", "down_proj")}

    shards = {f"model-0000{i}-of-00004.safetensors": {} for i in range(1, 5)}
    names = list(shards)
    shards[names[0]]["model.embed_tokens.weight"] = example.Hole("BF16", (c["vocab_size"], h))
    shards[names[3]]["lm_head.weight"] = example.Hole("BF16", (c["vocab_size"], h))
    for n, home in ((0, 0), (1, 1), (2, 3)):          # layer 1 over shards 2 and 3; layer 0 dense, 1 and 2 MoE
        pre = f"model.layers.{n}."
        attn = _layer_tensors(c, rng if n == 1 else None)
        for i, (name, value) in enumerate(attn.items()):
            shards[names[home + (n == 1 and i >= len(attn) // 2)]][pre + "self_attn." + name] = value
        if n == 0:
            shards[names[home]].update({pre + k: v for k, v in mlp("mlp", c["intermediate_size"]).items()})
        for e in range(c["n_routed_experts"] if n else 0):
            shards[names[home + (n == 1 and e % 2)]].update(
                {pre + k: v for k, v in mlp(f"mlp.experts.{e}", c["moe_intermediate_size"]).items()})
    example.write_release(folder, {**c, "num_hidden_layers": 3}, shards)


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _rchar() -> int:
    return int(next(line.split()[1] for line in Path("/proc/self/io").read_text().splitlines()
                    if line.startswith("rchar:")))


def worker(release: Path, what: str) -> None:
    """One measurement (``what``: "construct" or "from_pretrained"); prints a JSON line."""
    import mindspore as ms

    import ms_grad_ops as mgo
    from ms_grad_ops.nn import deepseek_io

    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    mgo.nn.DSAttention(32, 2, 16, 16, 8, 8, 8, 2, 16, 4, max_seq_len=16)        # warm-up
    kwargs = deepseek_io.pretrained_kwargs(release, {})
    before, read = _status("VmRSS"), _rchar()
    Path("/proc/self/clear_refs").write_text("5")
    start = time.time()
    if what == "construct":
        attn = mgo.nn.DSAttention(**kwargs)
    else:
        attn = mgo.nn.DSAttention.from_pretrained(release, layer=1)
    seconds = time.time() - start
    print(json.dumps({"what": what, "peak": _status("VmHWM") - before, "held": _status("VmRSS") - before,
                      "read": _rchar() - read, "seconds": seconds,
                      "param_bytes": 4 * sum(p.size for p in attn.trainable_params()),
                      "largest_param_bytes": 4 * max(p.size for p in attn.trainable_params()),
                      "table_bytes": 4 * (attn.cos.size + attn.sin.size)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=["deepseek", "small"], default="deepseek")
    parser.add_argument("--as-worker", nargs=2, metavar=("RELEASE", "WHAT"), help=argparse.SUPPRESS)
    parser.add_argument("--report-only", action="store_true", help="rewrite the Markdown from results.jsonl")
    args = parser.parse_args()
    if args.as_worker:
        worker(Path(args.as_worker[0]), args.as_worker[1])
        return
    if args.report_only:
        write_report()
        return
    from common import append_results, run_context
    config = {**example.DEEPSEEK_V32, **(SMALL_SIZES if args.config == "small" else {})}
    ctx = run_context(BENCH)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        release = Path(tmp) / "release"
        write(release, config)
        listed = json.loads((release / "model.safetensors.index.json").read_text())["metadata"]["total_size"]
        opened = sum((release / f"model-0000{i}-of-00004.safetensors").stat().st_size for i in (2, 3))
        for what in ("construct", "from_pretrained"):
            got = spawn_json([str(Path(__file__).resolve()), "--as-worker", str(release), what], timeout=1800)
            if "error" in got:
                raise SystemExit(f"{what}: {got['error']}")
            rows.append({"section": "One layer from a release", "config": args.config, "listed": listed,
                         "opened": opened, **got})
            print(json.dumps(rows[-1]), flush=True)
    append_results(ctx, rows)
    write_report()


def write_report() -> None:
    """Rewrites ``benchmarks/hf_release_memory.md`` from the latest run in results.jsonl."""
    from common import fmt, write_markdown
    mib = 1 << 20
    columns = [("sizes", lambda r: r["config"]), ("call", lambda r: f"`{r['what']}`"),
               ("release listed (MiB)", lambda r: f"{r['listed'] / mib:.0f}"),
               ("shards opened (MiB)", lambda r: f"{r['opened'] / mib:.0f}"),
               ("layer float32 parameters (MiB)", lambda r: f"{r['param_bytes'] / mib:.0f}"),
               ("largest parameter (MiB)", lambda r: f"{r['largest_param_bytes'] / mib:.0f}"),
               ("peak added (MiB)", lambda r: f"{r['peak'] / mib:.0f}"),
               ("held after (MiB)", lambda r: f"{r['held'] / mib:.0f}"),
               ("bytes read (MiB)", lambda r: f"{r['read'] / mib:.1f}"),
               ("wall (s)", lambda r: fmt(r["seconds"], ".1f"))]
    write_markdown(BENCH, "DSAttention.from_pretrained: memory and bytes read for one layer of a release",
                   [("One layer from a release", columns)],
                   ["Release: DeepSeek-V3.2's config.json, 3 layers in 4 shards; layer 1's attention tensors real "
                    "(FP8 + float32 weight_scale_inv, bfloat16, float32), everything else (other layers, 256 experts "
                    "per MoE layer, embedding, head) holes in the shards (listed, never written). `small`: "
                    f"{SMALL_SIZES} over DeepSeek's.",
                    "`construct`: `DSAttention(**arguments)` alone (initialised parameters and rope tables); "
                    "`from_pretrained`: construct + load. Peak added = resident high-water mark during the call "
                    "minus the resident size before it, after a warm-up (scripts/bench/hf_release_memory.py); "
                    "bytes read = growth of /proc/self/io rchar (the index, two shard headers, the layer's tensors).",
                    "Wall times on a shared 2-core machine: not a speed measurement."])


if __name__ == "__main__":
    main()
