"""Float64 NumPy oracle of ``nn.DSAttention``: forward, and gradients of every parameter by a small
reverse-mode tape. Independent of the package: dense attention with the mask ``selected & causal``
(the selection taken from the layer's forward), the indexer's KL loss written from docs/contract.md section 4.2.

The layer casts the fused kernels' inputs (and the attention output) to its ``dtype``; the oracle
rounds the same values with ``cast`` (round to nearest even, gradient passed through unchanged, as
MindSpore's Cast does), so with float16/bfloat16 the comparison measures the layer's arithmetic,
not the storage format it was asked to use.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


class Var:
    """A float64 array on the tape; ``grad`` is filled by :func:`backward`."""

    def __init__(self, value: np.ndarray, parents: Sequence[tuple[Var, Callable]] = ()) -> None:
        self.value = np.asarray(value, np.float64)
        self.parents = parents
        self.grad = np.zeros_like(self.value)

    # Arithmetic with broadcasting; gradients are summed back to each operand's shape.
    def __add__(self, o: object) -> Var:
        o = _var(o)
        return Var(self.value + o.value, ((self, _unb(self)), (o, _unb(o))))

    def __sub__(self, o: object) -> Var:
        return self + (-1.0) * _var(o)

    def __mul__(self, o: object) -> Var:
        o = _var(o)
        a, b = self.value, o.value
        return Var(a * b, ((self, lambda g: _reduce(g * b, a.shape)), (o, lambda g: _reduce(g * a, b.shape))))

    __rmul__ = __mul__
    __radd__ = __add__

    def __getitem__(self, idx: object) -> Var:
        shape = self.value.shape

        def back(g: np.ndarray) -> np.ndarray:
            full = np.zeros(shape)
            full[idx] = g
            return full
        return Var(self.value[idx], ((self, back),))

    def reshape(self, *shape: int) -> Var:
        old = self.value.shape
        return Var(self.value.reshape(*shape), ((self, lambda g: g.reshape(old)),))

    def sum(self, axis: int, keepdims: bool = True) -> Var:
        shape = self.value.shape
        return Var(self.value.sum(axis, keepdims=keepdims),
                   ((self, lambda g: np.broadcast_to(g if keepdims else np.expand_dims(g, axis), shape)),))


def _var(x: object) -> Var:
    return x if isinstance(x, Var) else Var(np.asarray(x, np.float64))


def _reduce(g: np.ndarray, shape: tuple) -> np.ndarray:
    while g.ndim > len(shape):
        g = g.sum(0)
    for ax, n in enumerate(shape):
        if n == 1 and g.shape[ax] != 1:
            g = g.sum(ax, keepdims=True)
    return g


def _unb(v: Var) -> Callable:
    return lambda g: _reduce(g, v.value.shape)


def einsum(spec: str, a: Var, b: Var) -> Var:
    """Two-operand einsum; every index of one operand appears in the other or in the output."""
    ins, out = spec.split("->")
    sa, sb = ins.split(",")
    return Var(np.einsum(spec, a.value, b.value),
               ((a, lambda g: np.einsum(f"{out},{sb}->{sa}", g, b.value)),
                (b, lambda g: np.einsum(f"{out},{sa}->{sb}", g, a.value))))


def unary(v: Var, f: Callable, df: Callable) -> Var:
    """Element-wise ``f`` with derivative ``df(x)``."""
    x = v.value
    return Var(f(x), ((v, lambda g: g * df(x)),))


def concat(vs: Sequence[Var], axis: int) -> Var:
    sizes = np.cumsum([v.value.shape[axis] for v in vs])[:-1]

    def part(i: int) -> Callable:
        return lambda g: np.split(g, sizes, axis)[i]
    return Var(np.concatenate([v.value for v in vs], axis), tuple((v, part(i)) for i, v in enumerate(vs)))


def cast(v: Var, rounding: Callable[[np.ndarray], np.ndarray]) -> Var:
    """Forward rounding to the kernels' dtype; the gradient passes unchanged."""
    return Var(rounding(v.value), ((v, lambda g: g),))


def backward(root: Var, seed: np.ndarray) -> None:
    """Accumulates d(sum(root * seed)) into ``.grad`` of every Var reachable from root."""
    order, seen = [], set()

    def visit(v: Var) -> None:
        if id(v) in seen:
            return
        seen.add(id(v))
        for p, _ in v.parents:
            visit(p)
        order.append(v)
    visit(root)
    root.grad = root.grad + seed
    for v in reversed(order):
        for p, back in v.parents:
            p.grad = p.grad + back(v.grad)


# -- the layer ----------------------------------------------------------------------------------

def by_weight(spec: str, x: Var, w: Var) -> Var:
    """``einsum(spec, x, w)`` of per-token activations (axis ``n``) and a weight. A weight with one
    more, leading axis holds one copy per token (see :func:`gradient_terms`)."""
    ins, out = spec.split("->")
    sx, sw = ins.split(",")
    return einsum(f"{sx},{'n' * (w.value.ndim > len(sw))}{sw}->{out}", x, w)


def dense(x: Var, w: Var) -> Var:
    return by_weight("nk,ok->no", x, w)


def rms_norm(x: Var, w: Var, eps: float) -> Var:
    ms = (x * x).sum(-1) * (1.0 / x.value.shape[-1])
    return x * unary(ms + eps, lambda a: a ** -0.5, lambda a: -0.5 * a ** -1.5) * w


def layer_norm(x: Var, gamma: Var, beta: Var, eps: float) -> Var:
    d = x.value.shape[-1]
    xc = x - x.sum(-1) * (1.0 / d)
    var = (xc * xc).sum(-1) * (1.0 / d)
    return xc * unary(var + eps, lambda a: a ** -0.5, lambda a: -0.5 * a ** -1.5) * gamma + beta


def rope(x: Var, pos: np.ndarray, theta: float, interleaved: bool = True) -> Var:
    """Rotary embedding of x ``[N, H, Dr]``: pair i is channels (2i, 2i+1) (interleaved, MLA) or
    (i, i + Dr/2) (rotate-half, the indexer); ``(x0, x1) -> (x0 c - x1 s, x0 s + x1 c)``."""
    n, h, dr = x.value.shape
    ang = pos[:, None].astype(np.float64) * theta ** (-np.arange(0, dr, 2) / dr)[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    if not interleaved:
        x0, x1 = x[..., :dr // 2], x[..., dr // 2:]
        return concat([x0 * c - x1 * s, x0 * s + x1 * c], -1)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    y0, y1 = x0 * c - x1 * s, x0 * s + x1 * c
    return concat([y0.reshape(n, h, dr // 2, 1), y1.reshape(n, h, dr // 2, 1)], -1).reshape(n, h, dr)


def tokens(layout: str, sizes: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """``(seq, pos)`` of every flat token: its sequence id and position in it. ``sizes``: ``(B, S)``
    for BSND, the cumulative sequence lengths for TND."""
    if layout == "BSND":
        b, s = sizes
        return np.repeat(np.arange(b), s), np.tile(np.arange(s), b)
    seq = np.repeat(np.arange(len(sizes)), np.diff([0, *sizes]))
    return seq, np.arange(sizes[-1]) - np.array([0, *sizes])[seq]


def visible(seq: np.ndarray, pos: np.ndarray, selected: np.ndarray) -> np.ndarray:
    """bool ``[N, N]``: key j in query i's sequence, at or before it, and among its selected keys
    (``selected`` ``[N, K]`` local indices, -1 unused)."""
    n = seq.size
    start = np.arange(n) - pos
    mask = np.zeros((n, n), bool)
    for i in range(n):
        for j in selected[i]:
            if j >= 0:
                mask[i, start[i] + j] = True
    return mask & (seq[:, None] == seq[None, :]) & (np.arange(n)[None, :] <= np.arange(n)[:, None])


def _masked_softmax(s: Var, mask: np.ndarray) -> Var:
    m = np.where(mask, s.value, -np.inf).max(-1, keepdims=True)
    e = unary(s - m, np.exp, np.exp) * mask.astype(np.float64)
    return e * unary(e.sum(-1), lambda a: 1.0 / a, lambda a: -1.0 / a ** 2)


def _sink_softmax(s: Var, mask: np.ndarray, sink: Var) -> tuple[Var, np.ndarray]:
    """The softmax over ``s [N, H, M]``'s masked keys and one more logit per head, ``sink`` (``[H]``,
    or ``[N, H]`` tiled), whose value is zero: (the keys' probabilities, the sink's ``[N, H, 1]``)."""
    n, h = s.value.shape[:2]
    col = sink.reshape(*((1, h, 1) if sink.value.ndim == 1 else (n, h, 1)))
    m = np.maximum(np.where(mask, s.value, -np.inf).max(-1, keepdims=True), col.value)
    e = unary(s - m, np.exp, np.exp) * mask.astype(np.float64)
    e_sink = unary(col - m, np.exp, np.exp)
    inv = unary(e.sum(-1) + e_sink, lambda a: 1.0 / a, lambda a: -1.0 / a ** 2)
    return e * inv, (e_sink * inv).value


def forward(p: dict[str, Var], x: np.ndarray | Var, seq: np.ndarray, pos: np.ndarray, selected: np.ndarray,
            cfg: dict, rounding: Callable[[np.ndarray], np.ndarray]) -> tuple[Var, Var]:
    """``(out [N, dim], indexer_loss [])`` for flat tokens x ``[N, dim]`` (``seq``: sequence id,
    ``pos``: position in it; a Var to get the gradient of x). The indexer branch reads detached
    copies of x and qr; the teacher distribution is a constant (its value from the main attention).
    ``rounding``: the kernels' dtype."""
    xv = x if isinstance(x, Var) else Var(x)
    x = xv.value
    n, h = x.shape[0], cfg["n_heads"]
    nope, r, c, th = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["kv_lora_rank"], cfg["rope_theta"]
    qr = rms_norm(dense(xv, p["wq_a.weight"]), p["q_norm.weight"], cfg["eps"])
    q = dense(qr, p["wq_b.weight"]).reshape(n, h, nope + r)
    q_lat = by_weight("nhd,hdc->nhc", q[..., :nope], p["w_uk"])
    q_pe = rope(q[..., nope:], pos, th)
    kv = dense(xv, p["wkv_a.weight"])
    latent = rms_norm(kv[:, :c], p["kv_norm.weight"], cfg["eps"])
    k_pe = rope(kv[:, c:].reshape(n, 1, r), pos, th).reshape(n, r)
    q_lat, latent, q_pe, k_pe = (cast(v, rounding) for v in (q_lat, latent, q_pe, k_pe))
    mask = visible(seq, pos, selected)[:, None, :]
    scores = (einsum("nhc,mc->nhm", q_lat, latent) + einsum("nhr,mr->nhm", q_pe, k_pe)) * cfg["scale"]
    if "attn_sink" in p:  # DeepSeek-V4's sinks (docs/contract.md section 0.7)
        probs, p_sink = _sink_softmax(scores, mask, p["attn_sink"])
    else:
        probs, p_sink = _masked_softmax(scores, mask), np.zeros((n, h, 1))
    o = cast(einsum("nhm,mc->nhc", probs, latent), rounding)
    v = by_weight("nhc,hdc->nhd", o, p["w_uv"])
    out = dense(v.reshape(n, h * cfg["v_head_dim"]), p["wo.weight"])

    # Indexer on detached inputs; teacher = head-averaged attention probabilities (constants).
    x_d, qr_d = Var(x), Var(qr.value)
    hi, di = cfg["index_n_heads"], cfg["index_head_dim"]
    qi = dense(qr_d, p["wq_idx.weight"]).reshape(n, hi, di)
    qi = concat([rope(qi[..., :r], pos, th, interleaved=False), qi[..., r:]], -1)
    ki = layer_norm(dense(x_d, p["wk_idx.weight"]), p["k_norm.gamma"], p["k_norm.beta"], cfg["eps"])
    ki = concat([rope(ki[:, :r].reshape(n, 1, r), pos, th, interleaved=False).reshape(n, r), ki[:, r:]], -1)
    qi, ki = cast(qi, rounding), cast(ki, rounding)
    w = dense(x_d, p["weights_proj.weight"]) * (hi ** -0.5 * di ** -0.5)
    sx = einsum("ngd,md->ngm", qi, ki)
    score = einsum("ngm,ng->nm", unary(sx, lambda a: np.maximum(a, 0.0), lambda a: (a > 0).astype(float)), w)
    y = _masked_softmax(score, mask[:, 0, :])
    # The head mean; with sinks renormalised by 1 / (H - sum_h P_sink) (docs/contract.md section 4.2).
    teacher = probs.value.sum(1) / (h - p_sink.sum(1)) if "attn_sink" in p else probs.value.mean(1)
    log_p = np.log(np.maximum(teacher, 1e-8))
    log_y = unary(y, lambda a: np.log(np.maximum(a, 1e-8)), lambda a: 1.0 / np.maximum(a, 1e-8))
    kl = ((log_y * (-1.0) + log_p) * (teacher * mask[:, 0, :])).sum(-1).sum(0)
    return out, kl


def gradients(params: dict[str, np.ndarray], x: np.ndarray, seq: np.ndarray, pos: np.ndarray,
              selected: np.ndarray, cfg: dict, d_out: np.ndarray,
              rounding: Callable[[np.ndarray], np.ndarray] = lambda a: a) -> tuple[np.ndarray, float, dict, dict]:
    """``(out, loss, grads of sum(out * d_out), grads of loss)`` by parameter name."""
    main = {k: Var(v) for k, v in params.items()}
    out, _ = forward(main, x, seq, pos, selected, cfg, rounding)
    backward(out, d_out)
    idx = {k: Var(v) for k, v in params.items()}
    _, kl = forward(idx, x, seq, pos, selected, cfg, rounding)
    backward(kl, np.ones_like(kl.value))
    return (out.value, float(kl.value.reshape(-1)[0]), {k: v.grad for k, v in main.items()},
            {k: v.grad for k, v in idx.items()})


def input_gradient(params: dict[str, np.ndarray], x: np.ndarray, seq: np.ndarray, pos: np.ndarray,
                   selected: np.ndarray, cfg: dict, d_out: np.ndarray,
                   rounding: Callable[[np.ndarray], np.ndarray] = lambda a: a) -> np.ndarray:
    """The gradient of ``sum(out * d_out)`` with respect to x ``[N, dim]`` (what a layer in front of
    this one receives; the indexer loss reads x detached, so it adds nothing)."""
    xv = Var(x)
    out, _ = forward({k: Var(v) for k, v in params.items()}, xv, seq, pos, selected, cfg, rounding)
    backward(out, d_out)
    return xv.grad


def gradient_terms(params: dict[str, np.ndarray], x: np.ndarray, seq: np.ndarray, pos: np.ndarray,
                   selected: np.ndarray, cfg: dict, d_out: np.ndarray,
                   rounding: Callable[[np.ndarray], np.ndarray] = lambda a: a) -> tuple[np.ndarray, float, dict, dict]:
    """:func:`gradients`, with every parameter's gradient as its terms, one per token: ``[N, *shape]``,
    summing to the gradient. Found by giving every token its own copy of each parameter, whose
    gradient is then the token's term."""
    tiled = {k: np.broadcast_to(v, (x.shape[0], *v.shape)).copy() for k, v in params.items()}
    return gradients(tiled, x, seq, pos, selected, cfg, d_out, rounding)


def term_magnitude(terms: np.ndarray) -> float:
    """``||sum_t |c_t| ||`` of a gradient's terms ``[N, *shape]`` (:func:`gradient_terms`).

    The terms cancel (k_norm.beta's to about a ninth of their magnitude), and a sum's rounding error
    scales with its terms, not with the result: a tolerance relative to the result would hinge on
    summation order."""
    return float(np.linalg.norm(np.abs(terms).sum(0)))
