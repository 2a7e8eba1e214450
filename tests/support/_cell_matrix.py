"""The training matrix of every public Cell of ``ms_grad_ops.nn``, generated from the package.

Axes (none is a hand list of cases):

- Cells: every ``nn.Cell`` class in ``ms_grad_ops.nn.__all__`` (:func:`public_cells`). Each has a
  :class:`Builder` in ``BUILDERS``; a public Cell without one fails the matrix's completeness test.
- modes: PyNative, ``GRAPH_MODE`` (the whole step is one Cell: one compile) and an ``@ms.jit``
  function in PyNative (MindSpore 2.x's recommended form).
- layouts: docs/contract.md section 0.2's BSND and TND where one of the Cell's ops has a ``layout``
  attribute in the table (``_specs.OP_SPECS``); none otherwise.
- dtypes: the storage dtypes every op of the Cell takes on CPU (the table's dtype rows).

A case is one real training step (:func:`train_step`): ``nn.Dense`` layers in front of the Cell,
a float32 loss after it, ``ms.value_and_grad`` of every trainable parameter and an ``nn.SGD``
update. The case checks the gradients (and the Cell's forward outputs) against the float64
reference; the runner checks that the update applied them.
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import _dsa_oracle as oracle
import mindspore as ms
import numpy as np
from _selection import assert_same_selection, indexer_scores
from _upstream import FIN, Upstream, UpstreamNet, geometry, sfa_indices, weighted
from _util import MS_DTYPES, TOLERANCES, quantize, rel_l2, to_ms
from mindspore import Tensor, nn
from mindspore import ops as msops

import ms_grad_ops as mgo
from ms_grad_ops import reference as ref
from ms_grad_ops._specs import OP_SPECS

MODES = ("pynative", "graph", "jit")
LAYOUTS = ("BSND", "TND")  # docs/contract.md section 0.2
LR = 0.5


def public_cells() -> list[type[nn.Cell]]:
    """Every Cell class ``ms_grad_ops.nn`` exports."""
    found = (getattr(mgo.nn, name) for name in mgo.nn.__all__)
    return [c for c in found if inspect.isclass(c) and issubclass(c, nn.Cell)]


@dataclass
class Case:
    """One training problem. ``net.construct(*inputs) -> (loss, aux)``: Dense layers, the Cell and a
    float32 scalar loss; ``inputs`` is a flat tuple of tensors (the Dense inputs, the loss weights and
    the Cell's other tensors: indices, statistics, lengths), so ``set_inputs`` can make every one
    dynamic. ``aux``, a tuple of tensors, carries what the check needs from the same forward (the
    Cell's outputs, the keys an indexer selected). ``check(aux, grads, before)`` raises an
    AssertionError unless the forward and the gradients of ``net.trainable_params()`` (NumPy, in
    that order) match the float64 reference; ``before`` holds those parameters' values before the
    step (the reference's)."""

    net: nn.Cell
    inputs: tuple
    check: Callable[[list[np.ndarray], list[np.ndarray], list[np.ndarray]], None]


@dataclass(frozen=True)
class Builder:
    """How to train one Cell: the table's ops it runs and ``build(layout, dtype, variant=0,
    exact_inputs=True) -> Case``. Variant 1 has other token counts (for one graph that takes both).
    ``exact_inputs=False``: the Dense layers in front may round differently from the reference (amp
    runs them in float16), so checks that need the Cell's inputs to the bit are left out."""

    ops: tuple[str, ...]
    build: Callable[..., Case]

    @property
    def layouts(self) -> tuple[str | None, ...]:
        has = any(a.name == "layout" for op in self.ops for a in OP_SPECS[op].attrs)
        return LAYOUTS if has else (None,)

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The float dtypes of the first input of every op (the storage dtype), in table order."""
        per_op = [dict.fromkeys(row[0] for row in OP_SPECS[op].dtypes) for op in self.ops]
        return tuple(d for d in per_op[0] if all(d in seen for seen in per_op))


def matrix() -> Iterator[tuple[str, str, str | None, str]]:
    """``(Cell name, mode, layout or None, dtype)`` of every case."""
    for cell in public_cells():
        builder = BUILDERS.get(cell.__name__)
        if builder is None:  # reported by the completeness test
            continue
        for layout in builder.layouts:
            for dtype in builder.dtypes:
                for mode in MODES:
                    yield cell.__name__, mode, layout, dtype


# ------------------------------------------------------------------------------------ the step


class _Step(nn.Cell):
    """What ``nn.TrainOneStepCell`` does, returning the loss, ``aux`` and the gradients as well."""

    def __init__(self, net: nn.Cell, optimizer: nn.Optimizer) -> None:
        super().__init__(auto_prefix=False)
        self.optimizer = optimizer
        self.grad = ms.value_and_grad(net, None, optimizer.parameters, has_aux=True)

    def construct(self, *inputs: object) -> tuple:
        (loss, aux), grads = self.grad(*inputs)
        self.optimizer(grads)
        return loss, aux, grads


def run_step(case: Case, mode: str) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """One SGD step of ``case`` in ``mode``: ``(aux, grads, parameters before)`` as NumPy. Leaves
    MindSpore in PyNative mode."""
    params = case.net.trainable_params()
    before = [p.asnumpy().astype(np.float64) for p in params]
    optimizer = nn.SGD(params, learning_rate=LR)
    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    try:
        if mode == "graph":
            _, aux, grads = _Step(case.net, optimizer)(*case.inputs)
        else:
            grad_fn = ms.value_and_grad(case.net, None, optimizer.parameters, has_aux=True)

            def step(*inputs: object) -> tuple:
                (loss, aux), grads = grad_fn(*inputs)
                optimizer(grads)
                return loss, aux, grads
            _, aux, grads = (ms.jit(step) if mode == "jit" else step)(*case.inputs)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    return [a.asnumpy() for a in aux], [g.asnumpy().astype(np.float64) for g in grads], before


def check_update(case: Case, before: list[np.ndarray], grads: list[np.ndarray]) -> None:
    """Every parameter moved by ``-LR *`` its gradient (float32 SGD, to its rounding)."""
    eps = np.finfo(np.float32).eps
    for p, old, g in zip(case.net.trainable_params(), before, grads):
        want = old - LR * g
        bound = eps * (np.abs(old) + np.abs(LR * g))
        assert (np.abs(p.asnumpy() - want) <= bound).all(), f"{p.name}: the SGD update did not apply its gradient"


def train_step(case: Case, mode: str) -> None:
    """One SGD step of ``case`` in ``mode``: its forward and gradients against the float64
    reference (``case.check``), and the update applied."""
    aux, grads, before = run_step(case, mode)
    case.check(aux, grads, before)
    check_update(case, before, grads)


def applied_gradients(case: Case, before: list[np.ndarray]) -> list[np.ndarray]:
    """The gradients an SGD step applied, ``(before - after) / LR``, for steps that do not return
    them (``nn.TrainOneStepCell``). Exact but for the float32 rounding of the parameters (relative
    ``eps * |p| / (LR * |g|)``, well inside the float16/bfloat16 tolerances)."""
    return [(old - p.asnumpy().astype(np.float64)) / LR for p, old in zip(case.net.trainable_params(), before)]


def dynamic(first: tuple, second: tuple) -> tuple:
    """``set_inputs`` arguments for two cases' inputs: unknown wherever their sizes differ (token and
    sequence counts), known elsewhere. (Every dim unknown fails in MindSpore 2.10 itself: a GRAPH
    ``TrainOneStepCell`` over ``nn.Dense`` -> ``reshape(-1, ...)`` with an input of unknown width
    raises "The method 'Clone()' doesn't implement".)"""
    return tuple(Tensor(shape=[a if a == b else None for a, b in zip(x.shape, y.shape)], dtype=x.dtype)
                 for x, y in zip(first, second))


# ------------------------------------------------------------------------------------ checks


def _close(what: str, got: np.ndarray, want: np.ndarray, tol: float, scale: float = 0.0) -> None:
    got = np.asarray(got, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, reference {want.shape}"
    assert np.isfinite(got).all(), f"{what}: non-finite values"
    err = rel_l2(got, want, scale)
    assert err <= tol, f"{what}: relative L2 error {err:.3g} > {tol:g}"


def _check_denses(up: Upstream, grads: list[np.ndarray], x_grads: list[np.ndarray], tol: float) -> None:
    """The Dense layers' gradients against the chain rule of the reference's ``x_grads``, weight and
    bias together (a bias gradient alone can be rounding noise around an exact zero)."""
    wants = up.param_grads(x_grads)
    for i in range(0, len(wants), 2):
        got = np.concatenate([g.ravel() for g in grads[i:i + 2]])
        want = np.concatenate([w.ravel() for w in wants[i:i + 2]])
        if not want.any():
            assert not got.any(), f"Dense {i // 2} must get zero gradients"
            continue
        _close(f"Dense {i // 2} (weight and bias)", got, want, tol)


class _Body(nn.Cell):
    """``fn(cell, xs, ws, cs) -> (loss, aux)`` behind ``UpstreamNet``'s Dense layers: ``n_w`` loss
    weights, then the Cell's other tensors ``cs``."""

    def __init__(self, cell: nn.Cell, fn: Callable, n_w: int) -> None:
        super().__init__()
        self.cell, self.fn, self.n_w = cell, fn, n_w

    def construct(self, xs: tuple, rest: tuple) -> tuple:
        return self.fn(self.cell, xs, rest[:self.n_w], rest[self.n_w:])


def _upstream_case(up: Upstream, cell: nn.Cell, fn: Callable, ws: list[np.ndarray], consts: list[Tensor],
                   check: Callable) -> Case:
    net = UpstreamNet(up, _Body(cell, fn, len(ws)))
    return Case(net, (*(Tensor(h) for h in up.h), *(Tensor(w) for w in ws), *consts), check)


def _lengths(cs: tuple, at: int) -> tuple:
    """The two cumulative lengths ``cs[at:at + 2]`` (TND), or two Nones (BSND: none given)."""
    return (cs[at], cs[at + 1]) if len(cs) > at else (None, None)


def _lens(cum: tuple) -> list[Tensor]:
    """Cumulative lengths as int32 tensors (none in BSND)."""
    return [Tensor(np.asarray(c, np.int32)) for c in cum if c is not None]


# ------------------------------------------------------------------------------------ the Cells
# Each builder has two size variants (the second for one graph taking other token counts).


def _rope_loss(cell: nn.Cell, xs: tuple, ws: tuple, cs: tuple) -> tuple:
    yq, yk = cell(xs[0], xs[1], cs[0], cs[1], cs[2])
    return weighted(yq, ws[0]) + weighted(yk, ws[1]), (yq, yk)


def _rotary_embedding(layout: str | None, dtype: str, variant: int = 0, exact_inputs: bool = True) -> Case:
    rng = np.random.default_rng(1)
    lens, hidden = ([3, 4], [2, 5, 1])[variant], 256
    t = sum(lens)
    up = Upstream.make(rng, [(t, hidden), (t, hidden)], dtype)
    cos, sin = (quantize(rng.standard_normal((5, 128)), dtype) for _ in range(2))
    ws = [rng.standard_normal((t, hidden)).astype(np.float32) for _ in range(2)]
    tol = TOLERANCES["attention"][dtype]

    def check(aux: list[np.ndarray], grads: list[np.ndarray], before: list[np.ndarray]) -> None:
        for got, want in zip(aux, ref.rope(up.x[0], up.x[1], cos, sin, lens)):
            _close("rope forward", got, want, tol)
        wq, wk = (quantize(w, dtype) for w in ws)
        _check_denses(up, grads, list(ref.rope_grad(wq, wk, cos, sin, lens, mode="vjp")), tol)
    consts = [to_ms(cos, dtype), to_ms(sin, dtype), Tensor(np.asarray(lens, np.int32))]
    return _upstream_case(up, mgo.nn.RotaryEmbedding(), _rope_loss, ws, consts, check)


def _cla_loss(cell: nn.Cell, xs: tuple, ws: tuple, cs: tuple) -> tuple:
    merged = cell(xs[0], xs[1], xs[2], xs[3])
    return weighted(merged, ws[0]), (merged,)


def _cla_gate_merge(layout: str | None, dtype: str, variant: int = 0, exact_inputs: bool = True) -> Case:
    rng = np.random.default_rng(2)
    t, n, d = (5, 7)[variant], 3, 16
    up = Upstream.make(rng, [(t, n, d), (t, n, d), (t, n), (t, n)], dtype)
    w = rng.standard_normal((t, n, d)).astype(np.float32)
    tol = TOLERANCES["attention"][dtype]

    def check(aux: list[np.ndarray], grads: list[np.ndarray], before: list[np.ndarray]) -> None:
        _close("merge forward", aux[0], ref.cla_gate_merge(*up.x), tol)
        _check_denses(up, grads, list(ref.cla_gate_backward(quantize(w, dtype), *up.x)), tol)
    return _upstream_case(up, mgo.nn.ClaGateMerge(), _cla_loss, [w], [], check)


def _sfa_loss(cell: nn.Cell, xs: tuple, ws: tuple, cs: tuple) -> tuple:
    q, kv, qr, kr = xs
    lq, lk = _lengths(cs, 1)
    out = cell(q, kv, None, cs[0], qr, kr, lq, lk)
    return weighted(out, ws[0]), (out,)


def _sparse_flash_attention(layout: str, dtype: str, variant: int = 0, exact_inputs: bool = True) -> Case:
    """DeepSeek's use: key is value (``value=None``), with rope."""
    rng = np.random.default_rng(3)
    n1, d, dr, k = 4, 16, 8, 5
    batches, tq, tk, cum = geometry(layout, *(([4, 5], [6, 3]), ([3, 2, 6], [5, 1, 6]))[variant])
    up = Upstream.make(rng, [(*tq, n1, d), (*tk, 1, d), (*tq, n1, dr), (*tk, 1, dr)], dtype)
    idx = sfa_indices(rng, batches, k).reshape(*tq, 1, k)
    attrs = {"scale_value": 1.0 / np.sqrt(d + dr), "layout": layout}
    q, kv, qr, kr = up.x
    out, smax, ssum = ref.sparse_flash_attention(q, kv, kv, idx, qr, kr, *cum, **attrs)
    w = rng.standard_normal(out.shape).astype(np.float32)
    dq, dk, dv, dqr, dkr = ref.sparse_flash_attention_grad(q, kv, kv, idx, quantize(w, dtype), quantize(out, dtype),
                                                           smax, ssum, *cum, qr, kr, **attrs)
    tol = TOLERANCES["attention"][dtype]

    def check(aux: list[np.ndarray], grads: list[np.ndarray], before: list[np.ndarray]) -> None:
        _close("attention forward", aux[0], out, tol)
        _check_denses(up, grads, [dq, dk + dv, dqr, dkr], tol)
    cell = mgo.nn.SparseFlashAttention(**attrs)
    return _upstream_case(up, cell, _sfa_loss, [w], [Tensor(idx), *_lens(cum)], check)


def _indexer_loss(cell: nn.Cell, xs: tuple, ws: tuple, cs: tuple) -> tuple:
    lq, lk = _lengths(cs, 0)
    idx, val = cell(xs[0], xs[1], xs[2], lq, lk)
    used = msops.where(idx >= 0, val, msops.zeros_like(val))   # -1 slots hold -inf
    return (used * ws[0]).sum(), (idx, val)


def _lightning_indexer(layout: str, dtype: str, variant: int = 0, exact_inputs: bool = True) -> Case:
    rng = np.random.default_rng(4)
    nidx, didx, k = 2, 8, 4
    lens = ([5, 6], [4, 3, 6])[variant]
    _, tq, tk, cum = geometry(layout, lens, lens)
    up = Upstream.make(rng, [(*tq, nidx, didx), (*tk, 1, didx), (*tq, nidx)], dtype)
    w = rng.standard_normal((*tq, 1, k)).astype(np.float32)
    tol = TOLERANCES["attention"][dtype]

    def check(aux: list[np.ndarray], grads: list[np.ndarray], before: list[np.ndarray]) -> None:
        idx, val = aux
        kw = {"layout": layout, "sparse_mode": 3}
        if exact_inputs:   # the top-k of the reference scores within float32 rounding
            assert_same_selection(idx, val, indexer_scores(*up.x, *cum, **kw), "LightningIndexer")
        d_values = np.where(idx >= 0, w, 0.0)
        _check_denses(up, grads, list(ref.lightning_indexer_grad(*up.x, idx, d_values, *cum, **kw)), tol)
    cell = mgo.nn.LightningIndexer(k, layout=layout)
    return _upstream_case(up, cell, _indexer_loss, [w], _lens(cum), check)


def _kl_loss(cell: nn.Cell, xs: tuple, ws: tuple, cs: tuple) -> tuple:
    q, k, qi, ki, wts, qr, kr = xs
    lq, lk = _lengths(cs, 3)
    loss = cell(q, k, qi, ki, wts, cs[0], cs[1], cs[2], qr, kr, lq, lk)
    return loss.sum() * ws[0], (loss,)


def _indexer_kl_loss(layout: str, dtype: str, variant: int = 0, exact_inputs: bool = True) -> Case:
    rng = np.random.default_rng(5)
    n1, d, dr, nidx, didx, k = 4, 16, 8, 2, 8, 5
    batches, tq, tk, cum = geometry(layout, *(([4, 5], [6, 3]), ([2, 6], [3, 7]))[variant])
    shapes = [(*tq, n1, d), (*tk, 1, d), (*tq, nidx, didx), (*tk, 1, didx), (*tq, nidx), (*tq, n1, dr), (*tk, 1, dr)]
    up = Upstream.make(rng, shapes, dtype)
    q, key, qi, ki, wts, qr, kr = up.x
    idx = sfa_indices(rng, batches, k).reshape(*tq, 1, k)
    kw = {"scale_value": 1.0 / np.sqrt(d + dr), "layout": layout}
    smax, ssum = (s.astype(np.float32) for s in ref.attention_softmax_stats(q, key, idx, qr, kr, *cum, **kw))
    dqi, dki, dw, loss = ref.sparse_lightning_indexer_grad_kl_loss(q, key, qi, ki, wts, idx, smax, ssum, qr, kr, *cum,
                                                                   **kw)
    scale = 3.0
    zeros = [np.zeros(s) for s in shapes]
    tol = TOLERANCES["attention"][dtype]

    def check(aux: list[np.ndarray], grads: list[np.ndarray], before: list[np.ndarray]) -> None:
        _close("KL loss", aux[0], np.array([loss]), tol)
        _check_denses(up, grads, [zeros[0], zeros[1], scale * dqi, scale * dki, scale * dw, zeros[5], zeros[6]], tol)
    cell = mgo.nn.IndexerKLLoss(kw["scale_value"], layout=layout)
    consts = [Tensor(idx), Tensor(smax), Tensor(ssum), *_lens(cum)]
    return _upstream_case(up, cell, _kl_loss, [np.asarray(scale, np.float32)], consts, check)


def _dense_kl_loss(cell: nn.Cell, xs: tuple, ws: tuple, cs: tuple) -> tuple:
    q, k, qi, ki, wts, qr, kr = xs
    lq, lk = _lengths(cs, 4)
    loss = cell(q, k, qi, ki, wts, cs[0], cs[1], cs[2], cs[3], qr, kr, lq, lk)
    return loss.sum() * ws[0], (loss,)


def _dense_indexer_kl_loss(layout: str, dtype: str, variant: int = 0, exact_inputs: bool = True) -> Case:
    rng = np.random.default_rng(6)
    n1, d, dr, nidx, didx = 4, 16, 8, 2, 8
    _, tq, tk, cum = geometry(layout, *(([4, 5], [6, 3]), ([2, 6], [3, 7]))[variant])
    shapes = [(*tq, n1, d), (*tk, 1, d), (*tq, nidx, didx), (*tk, 1, didx), (*tq, nidx), (*tq, n1, dr), (*tk, 1, dr)]
    up = Upstream.make(rng, shapes, dtype)
    q, key, qi, ki, wts, qr, kr = up.x
    kw = {"scale_value": 1.0 / np.sqrt(d + dr), "layout": layout}
    stats = [s.astype(np.float32) for s in (*ref.dense_attention_softmax_stats(q, key, qr, kr, *cum, **kw),
                                            *ref.dense_lightning_indexer_softmax_lse(qi, ki, wts, *cum, layout=layout))]
    dqi, dki, dw, loss = ref.dense_lightning_indexer_grad_kl_loss(q, key, qi, ki, wts, *stats, qr, kr, *cum, **kw)
    scale = 3.0
    zeros = [np.zeros(s) for s in shapes]
    tol = TOLERANCES["attention"][dtype]

    def check(aux: list[np.ndarray], grads: list[np.ndarray], before: list[np.ndarray]) -> None:
        _close("KL loss", aux[0], np.array([loss]), tol)
        _check_denses(up, grads, [zeros[0], zeros[1], scale * dqi, scale * dki, scale * dw, zeros[5], zeros[6]], tol)
    cell = mgo.nn.DenseIndexerKLLoss(kw["scale_value"], layout=layout)
    consts = [Tensor(s) for s in stats] + _lens(cum)
    return _upstream_case(up, cell, _dense_kl_loss, [np.asarray(scale, np.float32)], consts, check)


# DSAttention and its context-parallel form: a Dense makes x from FIN features per token; the loss
# is sum(out * d_out) + KL_WEIGHT * indexer_loss. The float64 oracle (_dsa_oracle) checks every
# parameter, the Dense's and the layer's, each against its gradient terms' magnitude.
DSA_CFG = {"dim": 20, "n_heads": 2, "q_lora_rank": 12, "kv_lora_rank": 10, "qk_nope_head_dim": 6,
           "qk_rope_head_dim": 4, "v_head_dim": 5, "index_n_heads": 3, "index_head_dim": 8, "index_topk": 3}
DSA_EXTRA = {"rope_theta": 10000.0, "eps": 1e-6}
DSA_INDEXER = ("wq_idx.", "wk_idx.", "k_norm.", "weights_proj.")
KL_WEIGHT = 0.5
# per variant: BSND (B, S); TND cumulative lengths
DSA_SIZES = ({"BSND": (2, 8), "TND": [4, 9, 13]}, {"BSND": (3, 6), "TND": [6, 11]})


class _DSANet(nn.Cell):
    """``construct(h, d_out, *extra) -> (objective, (out, indexer_loss, selected keys))``: ``dense ->
    layer``. ``extra``: the lengths (DSAttention, TND) or the context-parallel plan's inputs after x
    (``ContextParallelDSAttention``, whose lengths, the global ones, the keys' selection takes)."""

    def __init__(self, layer: nn.Cell) -> None:
        super().__init__()
        self.dense = nn.Dense(FIN, DSA_CFG["dim"])
        self.layer = layer
        self.context_parallel = isinstance(layer, mgo.nn.ContextParallelDSAttention)
        # an attribute, not the module constant: amp O1 re-emits this class's source elsewhere
        self.kl_weight = KL_WEIGHT

    def construct(self, h: Tensor, d_out: Tensor, *extra: Tensor) -> tuple:
        x = self.dense(h)
        out, loss = self.layer(x, *extra[:4]) if self.context_parallel else self.layer(x, *extra)
        # The keys the forward attended to (the indexer kernel on the same inputs).
        if self.context_parallel:
            selected = self.layer.attn.select(x, *extra[4:])
        else:
            selected = self.layer.select(x, *extra)
        return (out * d_out).sum() + self.kl_weight * loss.sum(), (out, loss, selected)


def _short(name: str) -> str:
    return name.split(".", 1)[1]


def dsa_layer(layout: str, dtype: str) -> mgo.nn.DSAttention:
    """The matrix's DSAttention (seeded: the same parameters every time)."""
    ms.set_seed(1)
    return mgo.nn.DSAttention(**DSA_CFG, max_seq_len=16, layout=layout, dtype=MS_DTYPES[dtype], **DSA_EXTRA)


def _dsa_case(layout: str, dtype: str, variant: int = 0, exact_inputs: bool = True, *, context_parallel: bool) -> Case:
    rng = np.random.default_rng(7)
    sizes = DSA_SIZES[variant][layout]
    seq, pos = oracle.tokens(layout, sizes)
    lead = tuple(sizes) if layout == "BSND" else (sizes[-1],)
    attn = dsa_layer(layout, dtype)
    lengths = [] if layout == "BSND" else [Tensor(np.asarray(sizes, np.int64))]
    if context_parallel:   # one rank: the plan of cp_size 1, no collectives
        plan = mgo.nn.ContextParallelPlan(sizes, 1, 0) if layout == "TND" else \
            mgo.nn.ContextParallelPlan.bsnd(*sizes, 1, 0)
        layer, extra = mgo.nn.ContextParallelDSAttention(attn, 1), [Tensor(a) for a in plan.inputs()] + lengths
    else:
        layer, extra = attn, lengths
    h = rng.standard_normal((*lead, FIN)).astype(np.float32)
    d_out = rng.standard_normal((*lead, DSA_CFG["dim"])).astype(np.float32)
    net = _DSANet(layer)
    tol = TOLERANCES["attention"][dtype]
    cfg = {**DSA_CFG, **DSA_EXTRA, "scale": attn.softmax_scale}
    n = seq.size

    def check(aux: list[np.ndarray], grads: list[np.ndarray], before: list[np.ndarray]) -> None:
        out, loss, selected = aux
        params = net.trainable_params()
        values = {_short(p.name): v for p, v in zip(params, before)}
        w, b = values.pop("weight"), values.pop("bias")     # the Dense in front
        x = h.reshape(n, FIN).astype(np.float64) @ w.T + b
        case = (values, x, seq, pos, selected.reshape(n, -1), cfg, d_out.reshape(n, -1).astype(np.float64),
                lambda a: quantize(a, dtype))
        ref_out, ref_loss, main, kl = oracle.gradient_terms(*case)
        assert (selected >= 0).sum(-1).min() >= 1
        _close("out", out.reshape(ref_out.shape), ref_out, tol)
        assert abs(float(loss.reshape(-1)[0]) - ref_loss) <= tol * abs(ref_loss) + 1e-6, (loss, ref_loss)
        dx = oracle.input_gradient(*case)
        wants = {"weight": np.einsum("nd,nf->ndf", dx, h.reshape(n, FIN)), "bias": dx}
        wants.update({k: KL_WEIGHT * kl[k] if k.startswith(DSA_INDEXER) else main[k] for k in main})
        for p, g in zip(params, grads):
            terms = wants[_short(p.name)]
            _close(p.name, g, terms.sum(0), tol, oracle.term_magnitude(terms))
    return Case(net, (Tensor(h), Tensor(d_out), *extra), check)


BUILDERS: dict[str, Builder] = {
    "RotaryEmbedding": Builder(("rope", "rope_grad"), _rotary_embedding),
    "ClaGateMerge": Builder(("cla_gate_merge", "cla_gate_backward"), _cla_gate_merge),
    "SparseFlashAttention": Builder(("sparse_flash_attention", "sparse_flash_attention_grad"),
                                    _sparse_flash_attention),
    "LightningIndexer": Builder(("lightning_indexer", "lightning_indexer_grad"), _lightning_indexer),
    "IndexerKLLoss": Builder(("sparse_lightning_indexer_grad_kl_loss",), _indexer_kl_loss),
    "DenseIndexerKLLoss": Builder(("dense_lightning_indexer_grad_kl_loss",), _dense_indexer_kl_loss),
    "DSAttention": Builder(("lightning_indexer", "sparse_flash_attention", "sparse_lightning_indexer_grad_kl_loss"),
                           functools.partial(_dsa_case, context_parallel=False)),
    "ContextParallelDSAttention": Builder(("lightning_indexer", "sparse_flash_attention",
                                           "sparse_lightning_indexer_grad_kl_loss"),
                                          functools.partial(_dsa_case, context_parallel=True)),
}
