"""MindSpore Transformers master's DeepSeek-V4 attention trained on CPU in PyNative mode.

The layers are mindformers' own: the pynative ``DSv4HybridSelfAttention`` built by
``get_dsv4_hybrid_module_spec`` (its unfused path, ``apply_dsa_kernel_fusion=False``), one per
compress ratio: 0 (sliding window), 4 (compressed sparse attention with the lightning indexer and
its KL loss) and 128 (heavily compressed), at small sizes: dim 64, 4 heads x 64 (rope 16), q LoRA
32, output groups 2 x 32, window 8, indexer 2 heads x 32 with top-k 4, S = 300, B = 1, float32.
``ms_grad_ops.builtins.install()`` is the only thing done about MindSpore's operators: on CPU it
binds stand-ins for what MindSpore 2.10 lacks there (``ms_grad_ops.cpu_gaps``: ``mint.outer``,
``arange``, ``full``, ``stack``, ``roll``, ``topk``, ``ones_like``/``zeros_like``, ``ops.rms_norm``)
and a ``mint.split`` whose PyNative gradient is right (MindSpore's is silently wrong after
``mint.cat``, which mindformers' RoPE does in every layer: docs/cpu.md).

What the example stands in for is mindformers' packaging, not MindSpore (section "Packaging
stand-ins" below; docs/migrating.md says why each is needed).

Run: ``python examples/mindformers_v4_cpu.py --mindformers <checkout>`` (a mindformers master
checkout: the folder holding ``mindformers/``; default ``$MGO_MINDFORMERS_MASTER``). It builds the
three layers with parameters drawn from ``--seed``, runs each forward and the gradient of
``sum(out * G)`` for a fixed random ``G`` (``--dump FILE.npz`` saves inputs, parameters under
DeepSeek's names, outputs, the indexer's picks and those gradients:
``tests/integration/test_mindformers_v4.py`` compares them with a float64 port of DeepSeek-V4's
``inference/model.py``), then trains each layer ``--steps`` steps with Adam on a regression loss
(plus, for ratio 4, mindformers' indexer KL loss, which it back-propagates into the indexer).
``--check`` exits non-zero unless every layer's loss falls and every trainable parameter gets a
non-zero gradient.

Written against mindformers master at commit ``167a50dec750bf8ea0b03f1dabf2818c28747a5a``
(2026-07-24).

``--fused`` builds the same layers with ``apply_dsa_kernel_fusion=True``: hyper-parallel's
``npu_sparse_flash_mla``, ``npu_sparse_flash_mla_grad``, ``npu_sparse_lightning_indexer_kl_loss_grad`` and
``npu_lightning_indexer`` are ``ms_grad_ops.builtins``' (``FUSED_OPS`` below, filled before mindformers is
imported), with ``csa_window_size`` 128 (mindformers' fused path accepts no other window). Two things
the fused path alone needs: the loss scale as a Python float (``_loss_scale_as_float``: MindSpore's CPU
gap for a bfloat16 x float32 ``Mul``), and S a multiple of 16 (``--seq-len 304``): mindformers' fused
indexer passes ``cmp_residual_k = (S // 4) % 4`` (its compressed key count mod the ratio) where
CANN's causal rule takes ``S % 4`` (the original tokens of the last incomplete block, as mindformers'
own ``npu_sparse_flash_mla`` call passes), so unless both are 0 every row may pick one compressed
key it cannot see yet, and loses a visible pick (measured at S = 300: 37 of 300 rows).
"""
from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import os
import re
import sys
import time
import types
from pathlib import Path

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn

ms.set_device("CPU")
ms.set_context(mode=ms.PYNATIVE_MODE)

from mindformers_2_0_0 import _StandIn  # noqa: E402  (this folder: a module of inert classes)

import ms_grad_ops  # noqa: E402

ms_grad_ops.builtins.install()

RATIOS = (0, 4, 128)
SEQ_LEN, BATCH = 300, 1
SIZES = dict(hidden_size=64, num_attention_heads=4, v_head_dim=64, kv_channels=64, qk_head_dim=48,
             qk_pos_emb_head_dim=16, q_lora_rank=32, kv_lora_rank=64, o_groups=2, o_lora_rank=32, csa_window_size=8,
             dsa_indexer_n_heads=2, dsa_indexer_head_dim=32, dsa_indexer_topk=4, rotary_base=10000.0,
             csa_compress_rotary_base=160000.0, rotary_scaling_factor=4.0, original_max_position_embeddings=256,
             beta_fast=32.0, beta_slow=1.0, layernorm_epsilon=1e-6)

# ----------------------------------------------------------------------------------------------
# Packaging stand-ins (mindformers', not MindSpore's; docs/migrating.md)
# ----------------------------------------------------------------------------------------------
# 1. mindformers/__init__ (and each subpackage's) imports the whole tree: trainers, datasets,
#    tokenizers, yaml configs... The V4 attention needs a few modules: its packages are created
#    bare (their folders on __path__, their __init__ not run), so only the modules the layers
#    import are loaded.
# 2. ``regex`` (a PyPI package) is imported by mindformers' config and recompute modules for
#    user-given name patterns (init-method rules, recompute layer lists) the layers never use:
#    the standard ``re`` stands in (it lacks ``regex``'s ``timeout``, used by recompute only).
# 3. ``yaml`` is imported by the pynative config module, which the layers never use to read a
#    file: an inert module stands in for it.
# 4. ``hyper_parallel`` (not on PyPI) is imported for ``DTensor`` checks and activation
#    checkpointing: an empty stand-in (inert classes). Its ``custom_ops.experimental`` module holds
#    exactly ``FUSED_OPS``: empty, mindformers' ``try: from ... import npu_sparse_flash_mla``
#    fails and the layers use their unfused path; with ``--fused`` it holds ``ms_grad_ops.builtins``'.
FUSED_OPS: dict[str, object] = {}
FUSED_NAMES = ("npu_sparse_flash_mla", "npu_sparse_flash_mla_grad", "npu_sparse_lightning_indexer_kl_loss_grad",
               "npu_lightning_indexer")
FUSED_WINDOW = 128  # mindformers' fused path accepts no other csa_window_size


class _PackagingStandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, checkout: Path) -> None:
        self.checkout = checkout

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> object:
        top = fullname.split(".")[0]
        if top in ("hyper_parallel", "yaml"):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        folder = self.checkout.joinpath(*fullname.split("."))
        if top == "mindformers" and folder.is_dir():
            spec = importlib.machinery.ModuleSpec(fullname, self, is_package=True)
            spec.submodule_search_locations = [str(folder)]
            return spec
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if spec.name == "hyper_parallel.custom_ops.experimental":
            module = types.ModuleType(spec.name)
            module.__dict__.update(FUSED_OPS)
        elif spec.name.startswith("mindformers"):
            module = types.ModuleType(spec.name)
        else:
            module = _StandIn(spec.name)
        module.__path__ = spec.submodule_search_locations or []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def import_mindformers(checkout: Path) -> None:
    if not (checkout / "mindformers" / "pynative").is_dir():
        raise SystemExit(f"{checkout} holds no mindformers master checkout (mindformers/pynative/)")
    sys.meta_path.insert(0, _PackagingStandIns(checkout))
    sys.path.insert(0, str(checkout))
    sys.modules.setdefault("regex", re)


# ----------------------------------------------------------------------------------------------
# The layers, their parameters under DeepSeek's names
# ----------------------------------------------------------------------------------------------
def _deepseek_name(name: str) -> str:
    """mindformers' parameter name -> DeepSeek's (``inference/model.py``)."""
    name = name.replace("core_attention.", "").replace(".weight", "")
    for ours, theirs in (("linear_q_down_proj", "wq_a"), ("q_layernorm", "q_norm"), ("linear_q_up_proj", "wq_b"),
                         ("linear_kv_proj", "wkv"), ("kv_layernorm", "kv_norm"), ("linear_o_group_proj", "wo_a"),
                         ("linear_proj", "wo_b"), ("linear_wkv", "wkv"), ("linear_wgate", "wgate"),
                         ("linear_wq_b", "wq_b"), ("linear_weights_proj", "weights_proj")):
        name = re.sub(rf"(^|\.){ours}$", rf"\g<1>{theirs}", name)
    return name


def _loss_scale_as_float() -> None:
    """The one MindSpore CPU gap only the fused path meets, worked around here rather than by
    ``install()``: MindSpore 2.10 has no CPU ``Mul`` kernel for a bfloat16 tensor and a float32 tensor
    (either order). mindformers' fused backward multiplies the indexer gradients (bfloat16: it casts the
    indexer's query and key to bfloat16 for CANN's kernels) by its loss scale, a float32 ``Tensor(1.0)``
    until a trainer calls ``set_loss_scale``. The example sets that scale itself, to the Python float
    1.0: the same value, and a bfloat16 tensor times a Python float runs on CPU."""
    from mindformers.pynative.transformers.experimental_attention_variant.indexer import _IndexerLossAutoScaler

    _IndexerLossAutoScaler.set_loss_scale(1.0)


def build_layers(seed: int, fused: bool = False) -> list[nn.Cell]:
    """One ``DSv4HybridSelfAttention`` per ratio of ``RATIOS``, parameters drawn from ``seed``
    (linear weights N(0, 0.1^2), norm weights 1 + N(0, 0.1^2), ``ape`` and ``attn_sink`` N(0, 0.5^2):
    mindformers leaves ``ape`` and the output projection uninitialised until ``reset_parameter``)."""
    from mindformers.parallel_core.transformer_config import MLATransformerConfig
    from mindformers.parallel_core.utils.spec_utils import build_module
    from mindformers.pynative.base_models.gpt.experimental_attention_variant_module_specs import (
        get_dsv4_hybrid_module_spec,
    )

    config = MLATransformerConfig(
        num_layers=len(RATIOS), num_query_groups=1, multi_latent_attention=True,
        experimental_attention_variant="dsv4_hybrid", csa_compress_ratios=list(RATIOS),
        apply_dsa_kernel_fusion=fused, add_bias_linear=False,  # DeepSeek's projections have no bias
        compute_dtype="float32", params_dtype="float32", layernorm_compute_dtype="float32", rotary_dtype="float32",
        softmax_compute_dtype="float32", seq_length=SEQ_LEN, dsa_indexer_loss_coeff=1.0,
        dsa_indexer_use_sparse_loss=True, **SIZES)
    spec = get_dsv4_hybrid_module_spec(qk_layernorm=True)  # DeepSeek normalises q_lora and kv
    if fused:
        _loss_scale_as_float()
    rng = np.random.default_rng(seed)
    layers = []
    for number in range(len(RATIOS)):
        layer = build_module(spec, config=config, layer_number=number)  # ratio = csa_compress_ratios[number]
        for param in layer.get_parameters():
            scale = 0.5 if param.name.endswith(("ape", "attn_sink")) else 0.1
            value = rng.standard_normal(param.shape) * scale + (1.0 if "norm" in param.name else 0.0)
            param.set_data(Tensor(value.astype(np.float32)))
        layer.set_train(True)
        layers.append(layer)
    return layers


def deepseek_parameters(layer: nn.Cell) -> dict[str, np.ndarray]:
    return {_deepseek_name(p.name): p.asnumpy() for p in layer.get_parameters()}


class _RecordPicks:
    """Instrumentation only: keeps what mindformers' indexer returns (its top-k compressed entries)."""

    def __init__(self, indexer: nn.Cell) -> None:
        self.construct = indexer.construct
        self.picks: np.ndarray | None = None
        indexer.construct = self

    def __call__(self, *args: object, **kwargs: object) -> tuple:
        indices, scores = self.construct(*args, **kwargs)
        self.picks = indices.asnumpy()
        return indices, scores


def forward_and_gradient(layer: nn.Cell, x: np.ndarray, g: np.ndarray) -> dict:
    """The layer's output for ``x [S, B, dim]`` and the gradients of ``sum(out * g)`` with respect to
    ``x`` and every parameter (``grad.*``); the indexer's (``igrad.*``) are those of mindformers' indexer
    KL loss alone (its input is detached; the loss reaches it through mindformers' autograd functions)."""
    recorder = _RecordPicks(layer.core_attention.indexer) if layer.compress_ratio == 4 else None
    params = layer.trainable_params()
    g_t = Tensor(g.astype(np.float32))

    def objective(x_t: Tensor) -> Tensor:
        out = layer(x_t)
        return (out * g_t).sum(), out

    (_, out), (dx, dparams) = ms.value_and_grad(objective, 0, params, has_aux=True)(Tensor(x.astype(np.float32)))
    found = {"out": out.asnumpy(), "grad.x": dx.asnumpy()}
    for p, d in zip(params, dparams):  # the indexer's gradient is its KL loss's, whatever g is
        found[f"{'igrad' if '.indexer.' in p.name else 'grad'}.{_deepseek_name(p.name)}"] = d.asnumpy()
    if recorder is not None:
        found["picks"] = recorder.picks
        layer.core_attention.indexer.construct = recorder.construct
    return found


def train(layer: nn.Cell, x: np.ndarray, target: np.ndarray, steps: int, learning_rate: float) -> dict:
    """``steps`` Adam steps on ``mean((out - target)^2)`` (ratio 4: plus mindformers' indexer KL
    loss, attached to the output by its own autograd function)."""
    params = layer.trainable_params()
    x_t, target_t = Tensor(x.astype(np.float32)), Tensor(target.astype(np.float32))

    def loss_fn() -> Tensor:
        return ((layer(x_t) - target_t) ** 2).mean()

    grad_fn = ms.value_and_grad(loss_fn, None, params)
    optimizer = nn.Adam(params, learning_rate=learning_rate)
    losses, zero_grad, times = [], [], []
    for step in range(steps):
        start = time.time()
        loss, grads = grad_fn()
        optimizer(grads)
        times.append(time.time() - start)
        losses.append(float(loss.asnumpy()))
        if step == 0:
            zero_grad = [p.name for p, g in zip(params, grads) if not np.any(g.asnumpy())]
        print(f"[ratio {layer.compress_ratio:3d}] step {step + 1:2d}  loss {losses[-1]:.6f}", flush=True)
    return {"losses": losses, "zero_grad": zero_grad, "n_params": len(params), "step_s": float(np.median(times))}


def main() -> None:
    global SEQ_LEN
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mindformers", type=Path, default=os.environ.get("MGO_MINDFORMERS_MASTER"),
                        help="a mindformers master checkout (default: $MGO_MINDFORMERS_MASTER)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dump", type=Path, help="save inputs, parameters, outputs and gradients here (.npz)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 unless every layer's loss falls and every parameter gets a non-zero gradient")
    parser.add_argument("--fused", action="store_true",
                        help="apply_dsa_kernel_fusion=True: hyper-parallel's fused ops from ms_grad_ops.builtins")
    parser.add_argument("--window", type=int, default=None,
                        help=f"csa_window_size (default {SIZES['csa_window_size']}, {FUSED_WINDOW} with --fused)")
    parser.add_argument("--seq-len", type=int, default=SEQ_LEN,
                        help=f"S (default {SEQ_LEN}; with --fused, a multiple of 16 for the indexer's causality: "
                             "see the module docstring)")
    args = parser.parse_args()
    if args.mindformers is None:
        raise SystemExit("give --mindformers <checkout> or set MGO_MINDFORMERS_MASTER")
    SIZES["csa_window_size"] = args.window or (FUSED_WINDOW if args.fused else SIZES["csa_window_size"])
    if args.fused:
        FUSED_OPS.update({name: getattr(ms_grad_ops.builtins, name) for name in FUSED_NAMES})
    SEQ_LEN = args.seq_len
    import_mindformers(args.mindformers.resolve())
    start = time.time()
    rng = np.random.default_rng(args.seed + 1)
    x = rng.standard_normal((SEQ_LEN, BATCH, SIZES["hidden_size"]))
    g = rng.standard_normal((SEQ_LEN, BATCH, SIZES["hidden_size"]))
    dump: dict[str, np.ndarray] = {"x": x, "g": g}
    for key, value in SIZES.items():
        dump[f"size.{key}"] = np.asarray(value)
    layers = build_layers(args.seed, fused=args.fused)
    for ratio, layer in zip(RATIOS, layers):
        dump.update({f"{ratio}.param.{k}": v for k, v in deepseek_parameters(layer).items()})
        dump.update({f"{ratio}.{k}": v for k, v in forward_and_gradient(layer, x, g).items()})
    if args.dump:
        np.savez(args.dump, **dump)

    target = rng.standard_normal((SEQ_LEN, BATCH, SIZES["hidden_size"])) * 0.3
    trained = {str(ratio): train(layer, x, target, args.steps, args.learning_rate)
               for ratio, layer in zip(RATIOS, layers)}
    ok = {f"ratio_{r}_loss_falls": t["losses"][-1] < t["losses"][0] for r, t in trained.items()}
    ok["every_gradient_nonzero"] = not any(t["zero_grad"] for t in trained.values())
    ok["finite"] = bool(np.isfinite([v for t in trained.values() for v in t["losses"]]).all())
    result = {"trained": trained, "ok": ok, "seconds": time.time() - start}
    print(f"trained {len(layers)} layers in {result['seconds']:.1f} s; checks: {ok}", flush=True)
    print("RESULT " + json.dumps(result), flush=True)
    if args.check and not all(ok.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
