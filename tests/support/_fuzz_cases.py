"""Fuzz cases of the fourteen ops, run inside the fuzz worker process (tests/support/_fuzz_worker.py).

A case is a JSON-able dict made by the hypothesis strategies of tests/all_ops/test_fuzz_ops.py:
``{"op", "kind": "valid" | "malformed", "mode": "pynative" | "graph", "seed", "cfg": {...},
"mutation": [...]}``. :func:`run` builds the inputs from it (NumPy, seeded), calls the functional
op and returns ``(ok, detail)``:
- valid: the outputs must match the float64 reference (shape, NaN-free), each element within a
  dtype's tolerance of the size of the terms that make it (``terms``: the reference's sum of their
  absolute values, ``terms=True``), so an output whose terms cancel (a gradient that is exactly 0 in
  float64) is held to the rounding of its terms, not to its own tiny value;
- malformed: the call must raise ValueError / TypeError / RuntimeError whose message names the
  op; returning normally is a silent acceptance, any other exception a failure.
"""
from __future__ import annotations

from typing import Any

import mindspore as ms
import numpy as np
from _util import OpCell, quantize, rel_l2, to_ms, to_np
from mindspore import Tensor

from ms_grad_ops import ops
from ms_grad_ops import reference as ref
from ms_grad_ops._specs import OP_SPECS

TOL = {"elementwise": {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2},
       "attention": {"float32": 1e-4, "float16": 5e-3, "bfloat16": 3e-2}}
# The smallest subnormal of each output dtype: a value below it rounds to 0 whatever its terms.
SUBNORMAL = {"float32": 2.0**-149, "float16": 2.0**-24, "bfloat16": 2.0**-133}
MS_DTYPES = {"float16": ms.float16, "bfloat16": ms.bfloat16, "float32": ms.float32, "float64": ms.float64,
             "int8": ms.int8, "uint8": ms.uint8, "int16": ms.int16, "int32": ms.int32, "int64": ms.int64,
             "bool": ms.bool_, "complex64": ms.complex64}


class Call:
    """One op call: positional tensors (graph inputs in GRAPH mode) and keyword arguments."""

    def __init__(self, op: str, tensors: dict[str, Any], kwargs: dict[str, Any]) -> None:
        self.op, self.tensors, self.kwargs = op, tensors, kwargs

    def run(self, mode: str) -> Any:
        fn = getattr(ops, self.op)
        args = [to_tensor(v) for v in self.tensors.values()]
        kw = {k: to_tensor(v) if isinstance(v, _Arr) else v for k, v in self.kwargs.items()}
        if mode == "graph":
            ms.set_context(mode=ms.GRAPH_MODE)
            try:
                out = OpCell(fn, kw)(*args)
                return _sync(out)
            finally:
                ms.set_context(mode=ms.PYNATIVE_MODE)
        return _sync(fn(*args, **kw))


class _Arr:
    """An array with the dtype its tensor gets (float arrays hold already-quantized values)."""

    def __init__(self, a: np.ndarray, dtype: str) -> None:
        self.a, self.dtype = a, dtype


def to_tensor(v: Any) -> Any:
    if not isinstance(v, _Arr):
        return v
    if v.dtype in ("float16", "bfloat16", "float32"):
        return to_ms(v.a, v.dtype)
    return Tensor(np.asarray(v.a).astype(np.complex64 if v.dtype == "complex64" else np.float64 if
                                          v.dtype == "float64" else v.a.dtype), MS_DTYPES[v.dtype]) \
        if v.dtype in ("complex64", "float64") else Tensor(np.asarray(v.a), MS_DTYPES[v.dtype])


def _sync(out: Any) -> list:
    outs = out if isinstance(out, tuple) else (out,)
    return [None if o is None else (to_np(o) if o.dtype != ms.int32 else o.asnumpy()) for o in outs]


def _fl(rng: np.random.Generator, shape: tuple, dtype: str, scale: float = 1.0) -> _Arr:
    return _Arr(quantize(scale * rng.standard_normal(shape), dtype), dtype)


def _lens(values: list[int] | None, how: str) -> Any:
    if values is None:
        return None
    if how == "list":
        return list(values)
    return _Arr(np.asarray(values, np.int32 if how == "int32" else np.int64), how)


# ---------------------------------------------------------------- builders: cfg -> (Call, reference outputs, family)
def build_rope(op: str, rng: np.random.Generator, c: dict) -> tuple[Call, Any]:
    lens, msl, heads, dt, cdt = c["lens"], c["max_seq_len"], c["heads"], c["dtype"], c["cos_dtype"]
    t = sum(lens)
    names = OP_SPECS[op].inputs[:2]
    x0, x1 = _fl(rng, (t, 128 * heads), dt), _fl(rng, (t, 128 * heads), dt)
    cos, sin = _fl(rng, (msl, 128), cdt), _fl(rng, (msl, 128), cdt)
    kwargs: dict[str, Any] = {}
    if op == "rope_grad":
        kwargs["mode"] = c["mode"]
    lens_arg = _lens(lens, c["lens_as"])
    tensors = {names[0]: x0, names[1]: x1, "cos": cos, "sin": sin}
    if isinstance(lens_arg, _Arr):
        tensors["q_seq_len"] = lens_arg
    else:
        kwargs["q_seq_len"] = lens_arg
    call = Call(op, tensors, kwargs)

    f = ref.rope if op == "rope" else ref.rope_grad
    mode = {"mode": c["mode"]} if op == "rope_grad" else {}

    def reference() -> list:
        return list(f(x0.a, x1.a, cos.a, sin.a, lens, **mode))

    def terms() -> list:
        # every output element is a sum of two products, one of them with a sign taken from the sine
        # (rotate_half's or ATB's): with absolute inputs, one of the sine's signs adds both terms
        plus, minus = (f(np.abs(x0.a), np.abs(x1.a), np.abs(cos.a), sign * np.abs(sin.a), lens, **mode)
                       for sign in (1, -1))
        return [np.maximum(a, b) for a, b in zip(plus, minus)]
    return call, reference, terms


def build_cla(op: str, rng: np.random.Generator, c: dict) -> tuple[Call, Any]:
    t, n, d, dt = c["t"], c["n"], c["d"], c["dtype"]
    og, ol = _fl(rng, (t, n, d), dt), _fl(rng, (t, n, d), dt)
    zg, zl = _fl(rng, (t, n), dt, c["zscale"]), _fl(rng, (t, n), dt, c["zscale"])
    tensors = {"global_attn": og, "local_attn": ol, "global_gate_logits": zg, "local_gate_logits": zl}
    if op == "cla_gate_backward":
        tensors = {"grad_merged": _fl(rng, (t, n, d), dt), **tensors}
    call = Call(op, tensors, {})

    f = ref.cla_gate_merge if op == "cla_gate_merge" else ref.cla_gate_backward

    def reference(absolute: bool = False) -> list:
        # the gates are sigmoids (positive): absolute attention values and gradients add every term
        out = f(*(np.abs(x.a) if absolute and name not in gates else x.a for name, x in tensors.items()))
        return list(out) if isinstance(out, tuple) else [out]
    gates = ("global_gate_logits", "local_gate_logits")
    return call, reference, (lambda: reference(absolute=True))


def _geometry(c: dict) -> tuple[list[tuple[int, int]], tuple, tuple]:
    """(S1_b, S2_b) per batch (BSND: the valid lengths) and the token prefixes of query and key tensors."""
    if c["layout"] == "TND":
        return list(zip(c["lens_q"], c["lens_kv"])), (sum(c["lens_q"]),), (sum(c["lens_kv"]),)
    lq = c.get("lens_q") or [c["s1"]] * c["b"]
    lk = c.get("lens_kv") or [c["s2"]] * c["b"]
    return list(zip(lq, lk)), (c["b"], c["s1"]), (c["b"], c["s2"])


def valid_rows(c: dict) -> np.ndarray:
    """The query rows (flat, TND order) the kernels read: BSND padding rows are not among them."""
    batches, tq, _ = _geometry(c)
    if c["layout"] == "TND":
        return np.arange(tq[0])
    return np.concatenate([b * c["s1"] + np.arange(n) for b, (n, _) in enumerate(batches)] + [np.zeros(0, int)])


def _place(rows: list, c: dict, tok: tuple, tail: tuple) -> np.ndarray:
    """Per-row index arrays (valid rows, in order) as ``[*tok, *tail]``; BSND padding rows hold
    out-of-range values (never read, so never an error)."""
    flat = np.full((int(np.prod(tok)), *tail), 10**6, np.int32)
    if rows:
        flat[valid_rows(c)] = np.asarray(rows, np.int32).reshape(-1, *tail)
    return flat.reshape(*tok, *tail)


def _indices(rng: np.random.Generator, c: dict, n2: int, k: int, bs: int) -> np.ndarray:
    """Block indices local to each batch, -1 anywhere (about 30 %), K possibly above the visible count."""
    batches, tok, _ = _geometry(c)
    out = []
    for s1, s2 in batches:
        nb = -(-s2 // bs)
        for _ in range(s1):
            rows = [np.where(rng.random(k) < 0.3, -1, rng.integers(0, nb, k) if nb else -1) for _ in range(n2)]
            out.append(np.stack(rows))
    return _place(out, c, tok, (n2, k))


def _ref_lens(c: dict) -> tuple:
    if c["layout"] == "BSND":
        return c.get("lens_q"), c.get("lens_kv")
    return list(np.cumsum(c["lens_q"])), list(np.cumsum(c["lens_kv"]))


def _call_lens(c: dict) -> tuple:
    if c["lens_as"] == "none":
        return None, None
    cq, ck = _ref_lens(c)
    return _lens(cq, c["lens_as"]), _lens(ck, c["lens_as"])


def _cmp(rng: np.random.Generator, c: dict) -> tuple[dict, dict]:
    """Compressed keys (docs/contract.md section 9.1): (the op's keyword arguments, the reference's). The key
    tensors hold the compressed entries; a residual per batch in [0, cmp_ratio) or none."""
    r = c.get("cmp_ratio", 1)
    res = None
    if c.get("residual") and r > 1:
        res = [int(x) for x in rng.integers(0, r, len(_geometry(c)[0]))]
    how = c["lens_as"] if c["lens_as"] != "none" else "list"
    return {"cmp_residual_k": _lens(res, how), "cmp_ratio": r}, {"cmp_residual_k": res, "cmp_ratio": r}


def _sinks(rng: np.random.Generator, c: dict, n1: int) -> _Arr | None:
    """The case's float32 sinks [N1] (docs/contract.md section 0.7), or None."""
    kind = c.get("sinks", "none")
    if kind == "none":
        return None
    x = rng.standard_normal(n1) * 2.0
    if kind == "neg_inf":
        x[rng.random(n1) < 0.5] = -np.inf
    elif kind == "large":
        x = rng.choice([30.0, 1e4], n1) + rng.standard_normal(n1)
    return _Arr(x.astype(np.float32).astype(np.float64), "float32")


def build_sfa(op: str, rng: np.random.Generator, c: dict) -> tuple[Call, Any]:
    batches, tq, tk = _geometry(c)
    n2, g, d, dr, dt, bs = c["n2"], c["g"], c["d"], c["dr"], c["dtype"], c["bs"]
    n1 = n2 * g
    q, k = _fl(rng, (*tq, n1, d), dt), _fl(rng, (*tk, n2, d), dt)
    v = None if c["value_none"] else _fl(rng, (*tk, n2, d), dt)
    qr = _fl(rng, (*tq, n1, dr), dt) if dr else None
    kr = _fl(rng, (*tk, n2, dr), dt) if dr else None
    idx = _Arr(_indices(rng, c, n2, c["k"], bs), "int32")
    lq, lk = _call_lens(c)
    rq, rk = _ref_lens(c)
    attrs = {"scale_value": c["scale"], "sparse_block_size": bs, "layout": c["layout"], "sparse_mode": c["mode"]}
    vv = k if v is None else v
    sk = _sinks(rng, c, n1)
    sinks = None if sk is None else sk.a
    fwd_args = (q.a, k.a, vv.a, idx.a, None if qr is None else qr.a, None if kr is None else kr.a, rq, rk, sinks)
    fwd = ref.sparse_flash_attention(*fwd_args, **attrs)
    if op == "sparse_flash_attention":
        call = Call(op, {"query": q, "key": k, "value": v, "sparse_indices": idx},
                    {"query_rope": qr, "key_rope": kr, "actual_seq_lengths_query": lq, "actual_seq_lengths_kv": lk,
                     "sinks": sk, **attrs})
        return call, (lambda: list(fwd)), (lambda: list(ref.sparse_flash_attention(*fwd_args, **attrs, terms=True)))
    out = _Arr(quantize(fwd[0], dt), dt)
    smax = _Arr(fwd[1].astype(np.float32).astype(np.float64), "float32")
    ssum = _Arr(fwd[2].astype(np.float32).astype(np.float64), "float32")
    d_out = _fl(rng, out.a.shape, dt)
    call = Call(op, {"query": q, "key": k, "value": v, "sparse_indices": idx, "d_out": d_out, "out": out,
                     "softmax_max": smax, "softmax_sum": ssum},
                {"actual_seq_lengths_query": lq, "actual_seq_lengths_kv": lk, "query_rope": qr, "key_rope": kr,
                 "sinks": sk, **attrs})

    def reference(terms: bool = False) -> list:
        g_ = ref.sparse_flash_attention_grad(q.a, k.a, vv.a, idx.a, d_out.a, out.a, smax.a, ssum.a, rq, rk,
                                             None if qr is None else qr.a, None if kr is None else kr.a, sinks,
                                             **attrs, terms=terms)
        g_ = list(g_) + [None] * (sinks is None)  # d_sinks
        if v is None:
            g_[1], g_[2] = g_[1] + g_[2], None
        return g_
    return call, reference, (lambda: reference(terms=True))


def _small_ints(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """Values exact in every float dtype, so float32 and float64 scores agree (ties included)."""
    return rng.integers(-2, 3, shape).astype(np.float64) * 0.5


def build_indexer(op: str, rng: np.random.Generator, c: dict) -> tuple[Call, Any]:
    batches, tq, tk = _geometry(c)
    dt, wdt, nidx, didx = c["dtype"], c["wdtype"], c["nidx"], c["didx"]
    qi, ki = _Arr(_small_ints(rng, (*tq, nidx, didx)), dt), _Arr(_small_ints(rng, (*tk, 1, didx)), dt)
    w = _Arr(_small_ints(rng, (*tq, nidx)), wdt)
    lq, lk = _call_lens(c)
    rq, rk = _ref_lens(c)
    cmp_op, cmp_ref = _cmp(rng, c)
    if op == "lightning_indexer":
        attrs = {"sparse_count": c["k"], "layout": c["layout"], "sparse_mode": c["mode"]}
        call = Call(op, {"query_index": qi, "key_index": ki, "weights": w},
                    {"actual_seq_lengths_query": lq, "actual_seq_lengths_key": lk, **cmp_op, **attrs})
        return call, (lambda: list(ref.lightning_indexer(qi.a, ki.a, w.a, rq, rk, **cmp_ref, **attrs))), None
    n1, d, dr = c["n1"], c["d"], c["dr"]
    q, k = _fl(rng, (*tq, n1, d), dt), _fl(rng, (*tk, 1, d), dt)
    qr = _fl(rng, (*tq, n1, dr), dt) if dr else None
    kr = _fl(rng, (*tk, 1, dr), dt) if dr else None
    qi = _fl(rng, (*tq, nidx, didx), dt, 0.5)
    ki = _fl(rng, (*tk, 1, didx), dt)
    w = _fl(rng, (*tq, nidx), wdt, 1 / np.sqrt(nidx))
    si = _Arr(_token_indices(rng, c, c["k"]), "int32")
    attrs = {"scale_value": c["scale"], "layout": c["layout"], "sparse_mode": c["mode"]}
    sk = _sinks(rng, c, n1)
    sinks = None if sk is None else sk.a
    mx, sm = ref.attention_softmax_stats(q.a, k.a, si.a, None if qr is None else qr.a, None if kr is None else kr.a,
                                         rq, rk, sinks, **cmp_ref, **attrs)
    mx, sm = _Arr(mx.astype(np.float32).astype(np.float64), "float32"), _Arr(sm.astype(np.float32), "float32")
    call = Call(op, {"query": q, "key": k, "query_index": qi, "key_index": ki, "weights": w, "sparse_indices": si,
                     "softmax_max": mx, "softmax_sum": sm},
                {"query_rope": qr, "key_rope": kr, "actual_seq_lengths_query": lq, "actual_seq_lengths_key": lk,
                 "sinks": sk, **cmp_op, **attrs})

    def reference(terms: bool = False) -> list:
        out = ref.sparse_lightning_indexer_grad_kl_loss(
            q.a, k.a, qi.a, ki.a, w.a, si.a, mx.a, sm.a.astype(np.float64), None if qr is None else qr.a,
            None if kr is None else kr.a, rq, rk, sinks, **cmp_ref, **attrs, terms=terms)
        return [out[0], out[1], out[2], np.asarray([out[3]])]
    return call, reference, (lambda: reference(terms=True))


def _token_indices(rng: np.random.Generator, c: dict, k: int) -> np.ndarray:
    batches, tok, _ = _geometry(c)
    out = []
    for s1, s2 in batches:
        for _ in range(s1):
            r = rng.permutation(max(s2, 1))[:k] if s2 else np.zeros(0, np.int64)
            r = np.concatenate([r, np.full(k - r.size, -1)]) if r.size < k else r
            out.append(rng.permutation(np.where(rng.random(k) < 0.25, -1, r)))
    return _place(out, c, tok, (1, k))


def build_indexer_grad(op: str, rng: np.random.Generator, c: dict) -> tuple[Call, Any]:
    """lightning_indexer_grad: random indices with duplicates, -1 anywhere and (mode 3) keys the
    mask hides; NaN in d_values at -1 slots (never read)."""
    batches, tq, tk = _geometry(c)
    dt, wdt, nidx, didx, k = c["dtype"], c["wdtype"], c["nidx"], c["didx"], c["k"]
    qi, ki = _fl(rng, (*tq, nidx, didx), dt, 0.5), _fl(rng, (*tk, 1, didx), dt)
    w = _fl(rng, (*tq, nidx), wdt, 1 / np.sqrt(nidx))
    rows = [np.where(rng.random(k) < 0.25, -1, rng.integers(0, s2, k)) if s2 else np.full(k, -1)
            for s1, s2 in batches for _ in range(s1)]
    idx = _place(rows, c, tq, (1, k))
    dv = rng.standard_normal(idx.shape)
    dv[(idx == -1) | (idx == 10**6)] = np.nan   # -1 slots and padding rows: never read
    si, dvals = _Arr(idx, "int32"), _Arr(dv.astype(np.float32).astype(np.float64), "float32")
    lq, lk = _call_lens(c)
    rq, rk = _ref_lens(c)
    cmp_op, cmp_ref = _cmp(rng, c)
    attrs = {"layout": c["layout"], "sparse_mode": c["mode"]}
    call = Call(op, {"query_index": qi, "key_index": ki, "weights": w, "sparse_indices": si, "d_values": dvals},
                {"actual_seq_lengths_query": lq, "actual_seq_lengths_key": lk, **cmp_op, **attrs})
    args = (qi.a, ki.a, w.a, si.a, dvals.a, rq, rk)
    return call, (lambda: list(ref.lightning_indexer_grad(*args, **cmp_ref, **attrs))), \
        (lambda: list(ref.lightning_indexer_grad(*args, **cmp_ref, **attrs, terms=True)))


def build_kl_target(op: str, rng: np.random.Generator, c: dict) -> tuple[Call, Any]:
    """sparse_lightning_indexer_kl_loss_grad: indices as lightning_indexer_grad's; a target of random positive
    values whose row sum is below 1 (the window and the sink take the rest), NaN at -1 slots and padding rows
    (never read)."""
    _, tq, tk = _geometry(c)
    dt, wdt, nidx, didx, k = c["dtype"], c["wdtype"], c["nidx"], c["didx"], c["k"]
    qi, ki = _fl(rng, (*tq, nidx, didx), dt, 0.5), _fl(rng, (*tk, 1, didx), dt)
    w = _fl(rng, (*tq, nidx), wdt, 1 / np.sqrt(nidx))
    batches = _geometry(c)[0]
    rows = [np.where(rng.random(k) < 0.25, -1, rng.integers(0, s2, k)) if s2 else np.full(k, -1)
            for s1, s2 in batches for _ in range(s1)]
    idx = _place(rows, c, tq, (1, k))
    p = rng.random(idx.shape) / k
    p[(idx == -1) | (idx == 10**6)] = np.nan
    si, target = _Arr(idx, "int32"), _Arr(p.astype(np.float32).astype(np.float64), "float32")
    lq, lk = _call_lens(c)
    rq, rk = _ref_lens(c)
    cmp_op, cmp_ref = _cmp(rng, c)
    attrs = {"layout": c["layout"], "sparse_mode": c["mode"]}
    call = Call(op, {"query_index": qi, "key_index": ki, "weights": w, "sparse_indices": si,
                     "attn_softmax_l1_norm": target},
                {"actual_seq_lengths_query": lq, "actual_seq_lengths_key": lk, **cmp_op, **attrs})

    def reference(terms: bool = False) -> list:
        out = ref.sparse_lightning_indexer_kl_loss_grad(qi.a, ki.a, w.a, si.a, target.a, rq, rk, **cmp_ref, **attrs,
                                                        terms=terms)
        # the loss's terms have both signs: its bound gets an absolute floor of 1 (loss ~ O(rows))
        return [*out[:4], np.asarray([max(abs(out[4]), 1.0) if terms else out[4]])]
    return call, reference, (lambda: reference(terms=True))


def build_smla(op: str, rng: np.random.Generator, c: dict) -> tuple[Call, Any]:
    """sparse_flash_mla(_grad) on a tests/support/_smla_cases case (band or ori indices, SWA/HCA/CSA, TND with
    cu_seqlens and maybe seqused, BSND with seqused); the grad's statistics from the float64 forward."""
    from _smla_cases import make_case
    case = make_case(rng, layout=c["layout"], lens=[tuple(x) for x in c["lens"]], kind=c["kind"], n1=c["n1"],
                     n2=c["n2"], d=c["d"], k=c["k"], ratio=c["ratio"], win_left=c["win_left"],
                     win_right=c["win_right"], ori_mask_mode=c["ori_mask_mode"], cmp_mask_mode=c["cmp_mask_mode"],
                     residual=c["residual"], sinks=c["sinks"], ori_k=c["ori_k"], pad=c["pad"], scale=c["scale"])
    # the query rows batches use (for the indices mutation: padding rows hold garbage that is never read)
    c["_rows"] = [q0 + t for (q0, _, _), (s1, _, _) in zip(case.starts, case.lens) for t in range(s1)]
    dt = c["dtype"]
    q, okv = (_Arr(quantize(case.arrays[n], dt), dt) for n in ("query", "ori_kv"))
    ckv = None if case.arrays["cmp_kv"] is None else _Arr(quantize(case.arrays["cmp_kv"], dt), dt)
    sk = None if case.arrays["sinks"] is None else _Arr(case.arrays["sinks"].astype(np.float64), "float32")
    ints = {n: None if v is None else _Arr(v, "int32") for n, v in case.ints.items()}
    opt = {"cmp_kv": ckv, **ints, "sinks": sk}
    ref_opt = {n: None if v is None else v.a for n, v in opt.items()}
    fwd = ref.sparse_flash_mla(q.a, okv.a, **ref_opt, **case.attrs)
    if op == "sparse_flash_mla":
        def terms() -> list:
            lse = fwd[1]
            return [ref.sparse_flash_mla(q.a, okv.a, **ref_opt, **case.attrs, terms=True)[0],
                    np.where(np.isfinite(lse), np.maximum(np.abs(lse), 1.0), 0.0)]
        return Call(op, {"query": q, "ori_kv": okv}, {**opt, **case.attrs}), (lambda: list(fwd)), terms
    out = _Arr(quantize(fwd[0], dt), dt)
    lse = _Arr(fwd[1].astype(np.float32).astype(np.float64), "float32")
    d_out = _fl(rng, out.a.shape, dt)
    call = Call(op, {"query": q, "d_out": d_out, "out": out, "softmax_lse": lse, "ori_kv": okv},
                {**opt, **case.attrs})

    def reference(terms: bool = False) -> list:
        return list(ref.sparse_flash_mla_grad(q.a, d_out.a, out.a, lse.a, okv.a, **ref_opt, **case.attrs,
                                              terms=terms))
    return call, reference, (lambda: reference(terms=True))


def build_dense(op: str, rng: np.random.Generator, c: dict) -> tuple[Call, Any]:
    """The dense pair: every visible key, main-attention key heads 1 or N1 (``mha``), statistics from the float64
    reference (float32, as the forward ops hand them over)."""
    _, tq, tk = _geometry(c)
    dt, wdt, nidx, didx = c["dtype"], c["wdtype"], c["nidx"], c["didx"]
    qi, ki = _fl(rng, (*tq, nidx, didx), dt, 0.5), _fl(rng, (*tk, 1, didx), dt)
    w = _fl(rng, (*tq, nidx), wdt, 1 / np.sqrt(nidx))
    lq, lk = _call_lens(c)
    rq, rk = _ref_lens(c)
    cmp_op, cmp_ref = _cmp(rng, c)
    kw = {"layout": c["layout"], "sparse_mode": c["mode"]}
    lens = {"actual_seq_lengths_query": lq, "actual_seq_lengths_key": lk, **cmp_op}
    if op == "dense_lightning_indexer_softmax_lse":
        call = Call(op, {"query_index": qi, "key_index": ki, "weights": w}, {**lens, **kw})
        return call, (lambda: list(ref.dense_lightning_indexer_softmax_lse(qi.a, ki.a, w.a, rq, rk, **cmp_ref,
                                                                           **kw))), None
    n1, d, dr = c["n1"], c["d"], c["dr"]
    n2 = n1 if c["mha"] else 1
    q, k = _fl(rng, (*tq, n1, d), dt), _fl(rng, (*tk, n2, d), dt)
    qr = _fl(rng, (*tq, n1, dr), dt) if dr else None
    kr = _fl(rng, (*tk, n2, dr), dt) if dr else None
    attrs = {"scale_value": c["scale"], **kw}
    stats = [*ref.dense_attention_softmax_stats(q.a, k.a, None if qr is None else qr.a, None if kr is None else kr.a,
                                                rq, rk, **cmp_ref, **attrs),
             *ref.dense_lightning_indexer_softmax_lse(qi.a, ki.a, w.a, rq, rk, **cmp_ref, **kw)]
    mx, sm, mxi, smi = (_Arr(x.astype(np.float32).astype(np.float64), "float32") for x in stats)
    call = Call(op, {"query": q, "key": k, "query_index": qi, "key_index": ki, "weights": w, "softmax_max": mx,
                     "softmax_sum": sm, "softmax_max_index": mxi, "softmax_sum_index": smi},
                {"query_rope": qr, "key_rope": kr, **lens, **attrs})

    def reference(terms: bool = False) -> list:
        out = ref.dense_lightning_indexer_grad_kl_loss(q.a, k.a, qi.a, ki.a, w.a, mx.a, sm.a, mxi.a, smi.a,
                                                       None if qr is None else qr.a, None if kr is None else kr.a,
                                                       rq, rk, **cmp_ref, **attrs, terms=terms)
        return [out[0], out[1], out[2], np.asarray([out[3]])]
    return call, reference, (lambda: reference(terms=True))


BUILDERS = {"rope": build_rope, "rope_grad": build_rope, "cla_gate_merge": build_cla, "cla_gate_backward": build_cla,
            "sparse_flash_attention": build_sfa, "sparse_flash_attention_grad": build_sfa,
            "lightning_indexer": build_indexer, "lightning_indexer_grad": build_indexer_grad,
            "sparse_lightning_indexer_grad_kl_loss": build_indexer, "dense_lightning_indexer_softmax_lse": build_dense,
            "dense_lightning_indexer_grad_kl_loss": build_dense, "sparse_flash_mla": build_smla,
            "sparse_flash_mla_grad": build_smla, "sparse_lightning_indexer_kl_loss_grad": build_kl_target}
FAMILY = {"rope": "elementwise", "rope_grad": "elementwise", "cla_gate_merge": "elementwise",
          "cla_gate_backward": "elementwise"}


# ---------------------------------------------------------------- checks
def _compare(op: str, c: dict, got: list, want: list, terms: list | None) -> str | None:
    """None when every output matches; else what differs. Each element of an output must be within
    ``tol * max(terms, |want|)`` (plus the dtype's smallest subnormal) of the reference: ``terms`` is
    the sum of the absolute values of the terms that make it (the reference with ``terms=True``; None
    for an op whose outputs do not cancel), so the bound scales with what float32 (or bfloat16
    operands) round, also where the exact value is 0. ``tol`` is the dtype's (float32 for the
    forward's float32 statistics)."""
    fam = FAMILY.get(op, "attention")
    dt = c["dtype"]
    if op == "lightning_indexer":
        if not np.array_equal(got[0], want[0]):
            return f"indices differ:\n{got[0]}\n{want[0]}"
        fin = np.isfinite(want[1])
        if not (np.array_equal(fin, np.isfinite(got[1])) and np.allclose(got[1][fin], want[1][fin], rtol=1e-6)):
            return "values differ"
        return None
    if len(got) != len(want):
        return f"{len(got)} outputs, reference {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if w is None or g is None:
            if (w is None) != (g is None):
                return f"output {i}: {g is None=} but reference {w is None=}"
            continue
        w = np.asarray(w, np.float64)
        if g.shape != w.shape:
            return f"output {i}: shape {g.shape} != {w.shape}"
        if np.isneginf(w).any():   # sparse_flash_mla's lse of a row without keys or sink: -inf exactly
            if not np.array_equal(np.isneginf(g), np.isneginf(w)):
                return f"output {i}: -inf at other places than the reference's"
            g, w = (np.where(np.isneginf(w), 0.0, x) for x in (g, w))
        if not np.isfinite(g).all():
            return f"output {i}: non-finite values"
        tol = TOL[fam]["float32" if (op.startswith("sparse_") and i > 0 and op == "sparse_flash_attention")
                       else dt]
        size = np.abs(w) if terms is None or terms[i] is None else np.maximum(np.asarray(terms[i], np.float64),
                                                                              np.abs(w))
        if size.shape != w.shape:
            return f"output {i}: terms shaped {size.shape}, output {w.shape}"
        excess = np.abs(g - w) - tol * size - SUBNORMAL[dt]
        if (excess > 0).any():
            at = np.unravel_index(int(np.argmax(excess)), w.shape)
            return (f"output {i}: element {at} = {g[at]:.6g}, reference {w[at]:.6g}, terms {size[at]:.3g}: error "
                    f"{abs(g[at] - w[at]):.3g} > {tol:g} x terms ({dt}; relative L2 {rel_l2(g, w):.3g})")
    return None


def run(case: dict) -> tuple[bool, str]:
    """Runs one case; (ok, what happened)."""
    op, c = case["op"], case["cfg"]
    rng = np.random.default_rng(case["seed"])
    call, reference, terms = BUILDERS[op](op, rng, c)
    if case["kind"] == "valid":
        got = call.run(case["mode"])
        problem = _compare(op, c, got, reference(), None if terms is None else terms())
        return problem is None, problem or "matches the reference"
    from _fuzz_mutations import mutate
    what = mutate(call, case["mutation"], c)
    try:
        call.run(case["mode"])
    except (ValueError, TypeError, RuntimeError) as e:
        msg = str(e)
        if op not in msg:
            return False, f"{what}: {type(e).__name__} without the op name: {msg[:300]}"
        return True, f"{what}: {type(e).__name__}: {msg.splitlines()[0][:200] if msg else ''}"
    except Exception as e:  # noqa: BLE001 - any other exception type is a finding
        return False, f"{what}: {type(e).__name__}: {str(e)[:300]}"
    return False, f"{what}: silently accepted"
