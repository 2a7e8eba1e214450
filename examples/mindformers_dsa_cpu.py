"""MindSpore Transformers 2.0.0's DSA layer (DeepSeek-V3.2 sparse attention) trained on CPU.

The layer is mindformers' own GRAPH-mode ``MLASelfAttentionConcatenated`` with its DSA core
attention (``parallel_core/training_graph/transformer/dsa``: ``DSAttention``, ``DSAIndexer``,
``DSAIndexerLoss``), unchanged. It calls MindSpore's built-ins ``ops.sparse_flash_attention`` and
``ops.lightning_indexer``, which exist only on Ascend; ``ms_grad_ops.builtins.install()`` binds this
package's CPU kernels onto those names, and that is the only thing done about the built-ins here.
Both training stages run: the dense warm-up (``dsa_indexer_use_sparse_loss=False``: mindformers'
own dense indexer and KL loss in plain ops) and the sparse stage (the lightning indexer's top-k;
the indexer learns only through the gradient of its ``sparse_values``).

What else is worked around below is MindSpore's CPU backend and mindformers' packaging, not this
package (each workaround says why; docs/migrating.md lists them):

1. Imports: ``mindformers/__init__`` imports its whole tree, which needs packages the DSA layer
   never uses (tokenizers, datasets, pyarrow, pandas builds that need numpy 2, jieba, nltk,
   hyper_parallel (not on PyPI), ...). Stand-in modules are put in ``sys.modules`` for them, and
   ``mindformers.tools`` is imported first (``transformer_config`` alone hits a circular import).
2. Sizes: ``MLATransformerConfig`` accepts the ``dsa`` variant only at DeepSeek's sizes (512/64/
   64x128): the config is built without the variant, which is set afterwards, with the layout.
3. CPU kernels MindSpore lacks: ``BatchMatMul`` does not broadcast batch dimensions on CPU
   (mindformers multiplies [S,B,N,1,D] by [N,D,R], [B,S,N,D] by [B,1,D,S] and by a [D,D] Hadamard
   matrix), and there is no CPU kernel for ``TopkExt`` or ``SliceExt``. The layer's instances of
   those three primitives are replaced by small Cells that do the same on CPU ops.
4. ``fused_norm=False`` (no CPU ``RmsNorm``); float32 only (no bfloat16 Reshape/AddN on CPU).
   The rotary frequencies are made in NumPy (mindformers' rotary module uses ``Outer``, which has
   no CPU kernel either).

Run: ``PYTHONPATH=<folder with mindformers 2.0.0> python examples/mindformers_dsa_cpu.py``
(``tests/integration/test_mindformers_dsa.py`` installs that folder: ``pip install --no-deps --target``
mindformers==2.0.0 and the few packages its modules import). ``--check`` prints the (a)/(b)
comparisons of the test as JSON instead of training.
"""
from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import json
import sys
import time
import types

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn
from mindspore import ops as msops
from mindspore.ops import operations as P

ms.set_device("CPU")
ms.set_context(mode=ms.GRAPH_MODE)

import ms_grad_ops  # noqa: E402

ms_grad_ops.builtins.install()

# ----------------------------------------------------------------------------------------------
# 1. Imports
# ----------------------------------------------------------------------------------------------
# Packages mindformers/__init__ pulls in that its DSA layer never uses. pandas/pyarrow are stood
# in even when installed: the builds mindformers' requirements pick need numpy 2 (MindSpore needs < 2).
_UNUSED = ("jieba", "rouge_chinese", "nltk", "datasets", "tokenizers", "tqdm", "hyper_parallel", "sentencepiece",
           "tiktoken", "mindpet", "tensorboardX", "transformers", "safetensors", "ftfy", "cv2", "setproctitle",
           "jinja2", "astunparse")
_ALWAYS_STOOD_IN = ("pandas", "pyarrow")


class _StandIn(types.ModuleType):
    """A module whose every attribute is an inert class (enough for import-time references)."""

    def __getattr__(self, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        value = type(name, (), {"__init__": lambda self, *a, **k: None})
        setattr(self, name, value)
        return value


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> object:
        if fullname.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StandIn(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def import_mindformers() -> types.SimpleNamespace:
    """mindformers' config, layer spec and helpers, imported past the unused parts of its tree."""
    missing = {n for n in _UNUSED if importlib.util.find_spec(n) is None} | set(_ALWAYS_STOOD_IN)
    for name in _ALWAYS_STOOD_IN:
        sys.modules.pop(name, None)
    sys.meta_path.insert(0, _StandInFinder(missing))
    import mindformers.tools  # noqa: F401  (first: transformer_config alone runs into a circular import)
    from mindformers.parallel_core.training_graph.base_models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from mindformers.parallel_core.training_graph.device_matrix import layout
    from mindformers.parallel_core.transformer_config import MLATransformerConfig
    from mindformers.parallel_core.utils.spec_utils import build_module

    return types.SimpleNamespace(MLATransformerConfig=MLATransformerConfig, spec=get_gpt_layer_local_spec,
                                 layout=layout, build_module=build_module)


# ----------------------------------------------------------------------------------------------
# 3. MindSpore CPU gaps: CPU versions of the primitives mindformers' layer uses
# ----------------------------------------------------------------------------------------------
class BroadcastBatchMatMul(nn.Cell):
    """``BatchMatMul(transpose_a, transpose_b)`` with NumPy-style batch broadcasting (MindSpore's
    CPU BatchMatMul requires equal batch dimensions)."""

    def __init__(self, transpose_a: bool = False, transpose_b: bool = False) -> None:
        super().__init__()
        self.bmm = P.BatchMatMul(transpose_a, transpose_b)

    def construct(self, a: Tensor, b: Tensor) -> Tensor:
        rank = max(a.ndim, b.ndim)
        a = a.reshape((1,) * (rank - a.ndim) + a.shape)
        b = b.reshape((1,) * (rank - b.ndim) + b.shape)
        batch = tuple(max(x, y) for x, y in zip(a.shape[:-2], b.shape[:-2]))
        a = msops.broadcast_to(a, batch + a.shape[-2:])
        b = msops.broadcast_to(b, batch + b.shape[-2:])
        return self.bmm(a, b)


class TopkLastDim(nn.Cell):
    """``TopkExt(x, k, dim)`` for the last dim (all mindformers uses), on the CPU ``TopK``."""

    def __init__(self) -> None:
        super().__init__()
        self.topk = P.TopK(sorted=True)

    def construct(self, x: Tensor, k: int, dim: int = -1, largest: bool = True, is_sorted: bool = True
                  ) -> tuple[Tensor, Tensor]:
        values, indices = self.topk(x, k)
        return values, indices.astype(ms.int64)


class SliceDim(nn.Cell):
    """``SliceExt(x, dim, start, end, step)`` on the CPU ``StridedSlice``."""

    def __init__(self) -> None:
        super().__init__()
        self.strided_slice = P.StridedSlice()

    def construct(self, x: Tensor, dim: int, start: int, end: int, step: int) -> Tensor:
        dim = dim % x.ndim
        begin = tuple(start if i == dim else 0 for i in range(x.ndim))
        stop = tuple(end if i == dim else x.shape[i] for i in range(x.ndim))
        strides = tuple(step if i == dim else 1 for i in range(x.ndim))
        return self.strided_slice(x, begin, stop, strides)


def replace_cpu_gaps(layer: nn.Cell) -> int:
    """Replaces, in every cell of ``layer``, the primitives without a CPU kernel (or without batch
    broadcasting on CPU) by the Cells above. Returns how many were replaced."""
    from mindspore.ops.auto_generate import gen_ops_prim

    replaced = 0
    for _, cell in list(layer.cells_and_names()):
        for name, value in list(vars(cell).get("_primitives", {}).items()):
            if isinstance(value, gen_ops_prim.BatchMatMul):
                new = BroadcastBatchMatMul(value.transpose_a, value.transpose_b)
            elif isinstance(value, gen_ops_prim.TopkExt):
                new = TopkLastDim()
            elif isinstance(value, gen_ops_prim.SliceExt):
                new = SliceDim()
            else:
                continue
            del cell._primitives[name]
            setattr(cell, name, new)
            replaced += 1
    return replaced


# ----------------------------------------------------------------------------------------------
# The model: mindformers' MLA + DSA layer, a task loss on its output
# ----------------------------------------------------------------------------------------------
SIZES = {"hidden_size": 32, "num_attention_heads": 2, "q_lora_rank": 16, "kv_lora_rank": 16, "qk_head_dim": 8,
         "qk_pos_emb_head_dim": 4, "v_head_dim": 8, "dsa_indexer_n_heads": 4, "dsa_indexer_head_dim": 8}


def build_layer(mf: types.SimpleNamespace, seq_len: int, batch: int, topk: int, sparse: bool, seed: int) -> nn.Cell:
    """mindformers' ``MLASelfAttentionConcatenated`` with DSA, tiny and float32, CPU gaps replaced."""
    ms.set_seed(seed)
    np.random.seed(seed)
    cfg = mf.MLATransformerConfig(
        num_layers=1, seq_length=seq_len, batch_size=batch, hidden_size=SIZES["hidden_size"],
        num_attention_heads=SIZES["num_attention_heads"], q_lora_rank=SIZES["q_lora_rank"],
        kv_lora_rank=SIZES["kv_lora_rank"], qk_head_dim=SIZES["qk_head_dim"],
        qk_pos_emb_head_dim=SIZES["qk_pos_emb_head_dim"], v_head_dim=SIZES["v_head_dim"],
        multi_latent_attention=True, use_flash_attention=True, qk_layernorm=True, normalization="RMSNorm",
        fused_norm=False, compute_dtype="float32", params_dtype="float32", layernorm_compute_dtype="float32",
        rotary_dtype="float32", softmax_compute_dtype="float32", add_bias_linear=False, init_method_std=0.2,
        dsa_indexer_n_heads=SIZES["dsa_indexer_n_heads"], dsa_indexer_head_dim=SIZES["dsa_indexer_head_dim"],
        dsa_indexer_topk=topk, dsa_indexer_loss_coeff=1.0, dsa_indexer_use_sparse_loss=sparse)
    # 2. The dsa variant is refused at these sizes: set it (and the layout it implies) afterwards.
    cfg.experimental_attention_variant = "dsa"
    cfg.input_layout = "BSND"
    mf.layout.init_layout(cfg)  # the Hadamard cells call shard() on construction
    spec = mf.spec(multi_latent_attention=True, sparse_attention=True, qk_layernorm=True, fused_norm=False,
                   mla_qkv_concat=True)
    layer = mf.build_module(spec.submodules.self_attention, config=cfg, layer_number=1)
    replace_cpu_gaps(layer)
    return layer


def rotary_freqs(seq_len: int, dim: int, base: float = 10000.0) -> Tensor:
    """[S, 1, 1, dim] rotary angles, as mindformers' rotary module would make them."""
    inv = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    angles = np.outer(np.arange(seq_len, dtype=np.float64), inv)
    return Tensor(np.concatenate([angles, angles], -1).reshape(seq_len, 1, 1, dim).astype(np.float32))


class TrainNet(nn.Cell):
    """x [S, B, H] -> the layer -> mean squared error to a target, plus the layer's indexer loss."""

    def __init__(self, layer: nn.Cell, seq_len: int, batch: int) -> None:
        super().__init__()
        self.layer = layer
        self.freqs = rotary_freqs(seq_len, SIZES["qk_pos_emb_head_dim"])
        mask = np.triu(np.ones((seq_len, seq_len), np.uint8), 1)
        self.mask = Tensor(np.broadcast_to(mask, (batch, 1, seq_len, seq_len)).copy())

    def construct(self, x: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        out, indexer_loss = self.layer(x, attention_mask=self.mask, rotary_pos_emb=(self.freqs, 1.0))
        task = ((out - target) ** 2).mean()
        return task + indexer_loss, indexer_loss


def copy_parameters(src: nn.Cell, dst: nn.Cell) -> None:
    """dst's parameters := src's (the two layers have one structure)."""
    for a, b in zip(src.trainable_params(), dst.trainable_params(), strict=True):
        b.set_data(a.data.copy())


class Stage:
    """One training stage: the layer in its net, its gradient function (compiled once, on first
    call, and reused by every step) and an Adam optimizer."""

    def __init__(self, layer: nn.Cell, seq_len: int, batch: int, learning_rate: float = 3e-3) -> None:
        self.layer = layer
        self.net = TrainNet(layer, seq_len, batch)
        self.params = self.net.trainable_params()
        self.grad_fn = ms.value_and_grad(self.net, None, self.params, has_aux=True)
        self.optimizer = nn.Adam(self.params, learning_rate=learning_rate)

    def grads(self, x: Tensor, target: Tensor) -> tuple[float, float, dict[str, np.ndarray]]:
        """(loss, indexer loss, {parameter name: gradient})."""
        (loss, indexer_loss), g = self.grad_fn(x, target)
        named = {p.name: v.asnumpy() for p, v in zip(self.params, g)}
        return float(loss.asnumpy()), float(indexer_loss.asnumpy()), named

    def step(self, x: Tensor, target: Tensor) -> tuple[float, float]:
        (loss, indexer_loss), g = self.grad_fn(x, target)
        self.optimizer(g)
        return float(loss.asnumpy()), float(indexer_loss.asnumpy())


# ----------------------------------------------------------------------------------------------
# --check: the comparisons tests/integration/test_mindformers_dsa.py asserts
# ----------------------------------------------------------------------------------------------
# The built-ins' pre_tokens/next_tokens default. A name, not ``2**63 - 1``: GRAPH mode evaluates a
# default written as an expression with int64 graph arithmetic, where 2**63 overflows.
_UNBOUNDED = 2**63 - 1


def _values_float64(query: Tensor, key: Tensor, weights: Tensor, indices: Tensor) -> Tensor:
    """``sum_g w_g relu(q_g . k_j)`` of the selected keys j, in float64 plain MindSpore ops
    (autodiff gives their gradient), BSND; -inf in -1 slots; returned in the query's dtype."""
    b, s, n, d = query.shape
    s2, k = key.shape[1], indices.shape[-1]
    rows = msops.maximum(indices, 0).reshape(b, s * k) + (msops.arange(b, dtype=ms.int32) * s2).reshape(b, 1)
    keys = msops.gather(key.astype(ms.float64).reshape(b * s2, d), rows.reshape(-1), 0).reshape(b * s, k, d)
    scores = msops.relu(P.BatchMatMul(False, True)(query.astype(ms.float64).reshape(b * s, n, d), keys))
    values = (scores * weights.astype(ms.float64).reshape(b * s, n, 1)).sum(1).reshape(b, s, 1, k)
    values = msops.select(indices >= 0, values, msops.full_like(values, -np.inf))
    return values.astype(query.dtype)


def reference_lightning_indexer(query: Tensor, key: Tensor, weights: Tensor, *, actual_seq_lengths_query: Tensor = None,
                                actual_seq_lengths_key: Tensor = None, block_table: Tensor = None,
                                layout_query: str = "BSND", layout_key: str = "BSND", sparse_count: int = 2048,
                                sparse_mode: int = 3, pre_tokens: int = _UNBOUNDED, next_tokens: int = _UNBOUNDED,
                                return_value: bool = False) -> tuple[Tensor, Tensor]:
    """The check's reference for the built-in: ms_grad_ops' selection, the values (and so their
    gradient) in float64 plain ops."""
    indices, _ = ms_grad_ops.builtins.lightning_indexer(
        query, key, weights, actual_seq_lengths_query=actual_seq_lengths_query,
        actual_seq_lengths_key=actual_seq_lengths_key, block_table=block_table, layout_query=layout_query,
        layout_key=layout_key, sparse_count=sparse_count, sparse_mode=sparse_mode, pre_tokens=pre_tokens,
        next_tokens=next_tokens, return_value=return_value)
    indices = msops.stop_gradient(indices)
    return indices, _values_float64(query, key, weights, indices)


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    den = float(np.linalg.norm(want.astype(np.float64)))
    num = float(np.linalg.norm(got.astype(np.float64) - want.astype(np.float64)))
    return num / den if den > 0 else num


def data(rng: np.random.Generator, seq_len: int, batch: int) -> tuple[Tensor, Tensor]:
    """A synthetic regression batch: x [S, B, H] -> the causal running mean of x (a task that needs
    attention to earlier tokens)."""
    xs = rng.standard_normal((seq_len, batch, SIZES["hidden_size"]))
    ys = np.cumsum(xs, 0) / np.arange(1, seq_len + 1).reshape(-1, 1, 1)
    return Tensor(xs.astype(np.float32)), Tensor(ys.astype(np.float32))


def check(mf: types.SimpleNamespace, seq_len: int, batch: int, small_topk: int, seed: int
          ) -> tuple[dict, Stage, Stage]:
    """(a) top-k = S: the sparse stage (lightning indexer, its values' gradient) against
    mindformers' dense stage, same parameters and data: loss and every parameter gradient.
    (b) top-k < S: the sparse stage's gradients against the same layer whose indexer values are
    computed (and differentiated) in float64 plain ops. Returns the numbers and the dense and
    the top-k < S sparse stage (their graphs compiled, for training on)."""
    x, target = data(np.random.default_rng(seed), seq_len, batch)

    def stage(topk: int, sparse: bool, source: nn.Cell | None) -> Stage:
        layer = build_layer(mf, seq_len, batch, topk, sparse, seed)
        if source is not None:
            copy_parameters(source, layer)
        return Stage(layer, seq_len, batch)

    dense = stage(seq_len, False, None)
    loss_d, kl_d, g_d = dense.grads(x, target)
    loss_s, kl_s, g_s = stage(seq_len, True, dense.layer).grads(x, target)
    a = {"loss_dense": loss_d, "loss_sparse": loss_s, "indexer_loss_dense": kl_d, "indexer_loss_sparse": kl_s,
         "loss_rel": abs(loss_s - loss_d) / abs(loss_d),
         "grad_rel": {name: _rel(g_s[name], g_d[name]) for name in g_d}}

    sparse = stage(small_topk, True, dense.layer)
    loss_o, _, g_o = sparse.grads(x, target)
    import mindspore.ops as ops_module
    ours = ops_module.lightning_indexer
    ops_module.lightning_indexer = reference_lightning_indexer  # seen when the next graph compiles
    try:
        loss_r, _, g_r = stage(small_topk, True, dense.layer).grads(x, target)
    finally:
        ops_module.lightning_indexer = ours
    indexer = [name for name in g_o if ".indexer." in name]
    b = {"topk": small_topk, "loss": loss_o, "loss_reference": loss_r,
         "indexer_grad_rel": {name: _rel(g_o[name], g_r[name]) for name in indexer},
         "indexer_grad_norm": {name: float(np.linalg.norm(g_o[name])) for name in indexer},
         "other_grad_rel": {name: _rel(g_o[name], g_r[name]) for name in g_o if name not in indexer}}
    return {"a": a, "b": b}, dense, sparse


def train(stage: Stage, rng: np.random.Generator, seq_len: int, batch: int, steps: int, name: str) -> list[float]:
    """``steps`` Adam steps on fresh synthetic batches; returns the losses."""
    losses = []
    for step in range(steps):
        loss, kl = stage.step(*data(rng, seq_len, batch))
        losses.append(loss)
        print(f"[{name}] step {step + 1:3d}  loss {loss:.4f}  indexer KL loss {kl:.4f}", flush=True)
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq-len", type=int, default=8)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--topk", type=int, default=4, help="sparse stage top-k (< seq-len)")
    parser.add_argument("--dense-steps", type=int, default=40)
    parser.add_argument("--sparse-steps", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true",
                        help="first print the (a)/(b) comparisons of tests/integration/test_mindformers_dsa.py as JSON")
    args = parser.parse_args()
    start = time.time()
    mf = import_mindformers()
    rng = np.random.default_rng(args.seed + 1)
    if args.check:
        numbers, dense, sparse = check(mf, args.seq_len, args.batch, args.topk, args.seed)
        print("CHECK " + json.dumps(numbers), flush=True)
    else:
        dense = Stage(build_layer(mf, args.seq_len, args.batch, args.seq_len, False, args.seed), args.seq_len,
                      args.batch)
        sparse = None
    first = train(dense, rng, args.seq_len, args.batch, args.dense_steps, "dense warm-up")
    if sparse is None:
        sparse = Stage(build_layer(mf, args.seq_len, args.batch, args.topk, True, args.seed), args.seq_len, args.batch)
    copy_parameters(dense.layer, sparse.layer)  # the sparse stage starts where the warm-up ended
    second = train(sparse, rng, args.seq_len, args.batch, args.sparse_steps, "sparse")
    finite = bool(np.isfinite(first + second).all())
    print(f"trained both stages in {time.time() - start:.1f} s; losses finite: {finite}", flush=True)
    print("TRAINED " + json.dumps({"dense": first, "sparse": second}))
    if not finite:
        sys.exit(1)


if __name__ == "__main__":
    main()
