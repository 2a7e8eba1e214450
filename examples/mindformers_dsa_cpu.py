"""MindSpore Transformers 2.0.0's DSA layer (DeepSeek-V3.2 sparse attention) trained on CPU.

The layer is mindformers' own GRAPH-mode ``MLASelfAttentionConcatenated`` with its DSA core
attention (``parallel_core/training_graph/transformer/dsa``: ``DSAttention``, ``DSAIndexer``,
``DSAIndexerLoss``), unchanged. It calls MindSpore's built-ins ``ops.sparse_flash_attention`` and
``ops.lightning_indexer``, which exist only on Ascend; ``ms_grad_ops.builtins.install()`` binds this
package's CPU kernels onto those names, and that is the only thing done about the built-ins here.
Both training stages run: the dense warm-up (``dsa_indexer_use_sparse_loss=False``: mindformers'
own dense indexer and KL loss in plain ops) and the sparse stage (the lightning indexer's top-k;
the indexer learns only through the gradient of its ``sparse_values``).

``install()`` also supplies the primitives MindSpore 2.10 runs only on Ascend that the layer uses
(``ms_grad_ops.cpu_gaps``: ``BatchMatMul``'s batch broadcasting, ``TopkExt``, ``SliceExt``,
``RmsNorm``). What is left is mindformers' own setup, done by ``mindformers_2_0_0`` (imports past
its unused dependencies; the ``dsa`` variant set after ``MLATransformerConfig``'s size check;
docs/migrating.md). float32 only: MindSpore has no bfloat16 Reshape/AddN on CPU.

Run: ``PYTHONPATH=<folder with mindformers 2.0.0> python examples/mindformers_dsa_cpu.py``
(``tests/integration/test_mindformers_dsa.py`` installs that folder: ``pip install --no-deps --target``
mindformers==2.0.0 and the few packages its modules import). ``--check`` prints the (a)/(b)
comparisons of the test as JSON instead of training.
"""
from __future__ import annotations

import argparse
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

import mindformers_2_0_0  # noqa: E402  (this folder: mindformers' own setup quirks)

import ms_grad_ops  # noqa: E402

ms_grad_ops.builtins.install()


def import_mindformers() -> types.SimpleNamespace:
    """mindformers' config, layer spec and helpers (imported past the unused parts of its tree)."""
    mindformers_2_0_0.import_mindformers()
    from mindformers.parallel_core.training_graph.base_models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from mindformers.parallel_core.training_graph.device_matrix import layout
    from mindformers.parallel_core.transformer_config import MLATransformerConfig
    from mindformers.parallel_core.utils.spec_utils import build_module

    return types.SimpleNamespace(MLATransformerConfig=MLATransformerConfig, spec=get_gpt_layer_local_spec,
                                 layout=layout, build_module=build_module)


# ----------------------------------------------------------------------------------------------
# The model: mindformers' MLA + DSA layer, a task loss on its output
# ----------------------------------------------------------------------------------------------
SIZES = {"hidden_size": 32, "num_attention_heads": 2, "q_lora_rank": 16, "kv_lora_rank": 16, "qk_head_dim": 8,
         "qk_pos_emb_head_dim": 4, "v_head_dim": 8, "dsa_indexer_n_heads": 4, "dsa_indexer_head_dim": 8}


def build_layer(mf: types.SimpleNamespace, seq_len: int, batch: int, topk: int, sparse: bool, seed: int) -> nn.Cell:
    """mindformers' ``MLASelfAttentionConcatenated`` with DSA, tiny and float32."""
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
    # The dsa variant is refused at these sizes: set it (and the layout it implies) afterwards.
    cfg.experimental_attention_variant = "dsa"
    cfg.input_layout = "BSND"
    mf.layout.init_layout(cfg)  # the Hadamard cells call shard() on construction
    spec = mf.spec(multi_latent_attention=True, sparse_attention=True, qk_layernorm=True, fused_norm=False,
                   mla_qkv_concat=True)
    return mf.build_module(spec.submodules.self_attention, config=cfg, layer_number=1)


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
