"""Malformed calls for the fuzz suite: one mutation applied to a valid ``_fuzz_cases.Call``.

``mutation`` is ``[kind, a, b]`` (kind a string, a/b small ints chosen by hypothesis that pick
the argument, dim and value). Every mutation here breaks a rule of the op whatever the valid
case was, so the call must fail (see ``_fuzz_cases.run``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ms_grad_ops._specs import OP_SPECS

KINDS = ("rank", "dtype", "dim", "attr_type", "attr_range", "lengths", "indices", "pair")

# Dims fixed by another argument or a constant: (argument, dim) with dim counted from the end.
_CONSTRAINED = {
    "rope": [("k", -1), ("k", -2), ("sin", -1), ("sin", -2), ("cos", -1), ("q", -1)],
    "rope_grad": [("k_grad", -1), ("k_grad", -2), ("sin", -1), ("sin", -2), ("cos", -1), ("q_grad", -1)],
    "cla_gate_merge": [("local_attn", -1), ("local_attn", -2), ("global_gate_logits", -1),
                       ("global_gate_logits", -2), ("local_gate_logits", -1)],
    "cla_gate_backward": [("grad_merged", -1), ("local_attn", -3), ("global_gate_logits", -1),
                          ("local_gate_logits", -2)],
    "sparse_flash_attention": [("key", -1), ("value", -2), ("value", -1), ("sparse_indices", -2),
                               ("sparse_indices", -3), ("key_rope", -1), ("query_rope", -2), ("sinks", -1)],
    "sparse_flash_attention_grad": [("d_out", -1), ("out", -2), ("softmax_max", -1), ("softmax_sum", -2),
                                    ("key", -1), ("sparse_indices", -3), ("key_rope", -1), ("sinks", -1)],
    "lightning_indexer": [("key_index", -1), ("key_index", -2), ("weights", -1), ("weights", -2)],
    "lightning_indexer_grad": [("key_index", -1), ("key_index", -2), ("weights", -1), ("weights", -2),
                               ("sparse_indices", -2), ("d_values", -1), ("d_values", -2)],
    "sparse_lightning_indexer_grad_kl_loss": [("key", -1), ("key", -2), ("key_index", -1), ("weights", -1),
                                              ("softmax_max", -1), ("softmax_sum", -2), ("sparse_indices", -2),
                                              ("query_rope", -2), ("sinks", -1)],
    "dense_lightning_indexer_softmax_lse": [("key_index", -1), ("key_index", -2), ("weights", -1), ("weights", -2)],
    # not key dim -2: N2 may be 1 or N1
    "dense_lightning_indexer_grad_kl_loss": [("key", -1), ("key_index", -1), ("weights", -1), ("softmax_max", -1),
                                             ("softmax_sum", -2), ("softmax_max_index", -1),
                                             ("softmax_sum_index", -1), ("query_rope", -2)],
    # not ori_kv dim -2: N2 only has to divide N1
    "sparse_flash_mla": [("ori_kv", -1), ("cmp_kv", -1), ("cmp_sparse_indices", -2), ("ori_sparse_indices", -2),
                         ("sinks", -1)],
    "sparse_flash_mla_grad": [("d_out", -1), ("out", -1), ("out", -2), ("softmax_lse", -1), ("ori_kv", -1),
                              ("cmp_kv", -1), ("cmp_sparse_indices", -2), ("sinks", -1)],
    "sparse_lightning_indexer_kl_loss_grad": [("key_index", -1), ("key_index", -2), ("weights", -1),
                                              ("weights", -2), ("sparse_indices", -2), ("attn_softmax_l1_norm", -1)],
}
_ATTR_TYPES = {a.name: a.type for spec in OP_SPECS.values() for a in spec.attrs}
_WRONG_TYPE = {"int": [1.5, "2", None, True, 3.0], "float": ["0.2", None, True, [0.5]],
               "bool": ["no", 1, None, 0.0], "str": [None, 3, b"TND", ["TND"]]}
_OUT_OF_RANGE = {"int": [2**31, -(2**31) - 1, 2**63 - 1, 2**64], "float": [float("nan"), float("inf"), 1e39, -1e40],
                 "str": ["", "BNSD", "tnd", "vjp "]}
_INT_ATTR_BAD = {"sparse_count": [0, -1], "sparse_block_size": [0, -3], "sparse_mode": [1, 2, -1, 4],
                 "pre_tokens": [0, 5], "next_tokens": [-1], "cmp_ratio": [0, -4, 129], "ori_mask_mode": [1, 2, 5],
                 "cmp_mask_mode": [1, 4, -1], "ori_win_left": [-2], "ori_win_right": [-3]}
_BAD_FLOAT_DTYPES = ("int8", "uint8", "int16", "complex64", "float64", "bool", "int32", "int64")
_BAD_INT_DTYPES = ("float32", "int8", "bool", "float16")
# Integer inputs (indices, lengths): every dtype combination of the table has an int there.
_INT_ARGS = {n for spec in OP_SPECS.values() for i, n in enumerate(spec.inputs)
             if all(row[i] in ("int32", "int64") for row in spec.dtypes)}


def _tensors(call: Any) -> dict[str, tuple[dict, str]]:
    """Every tensor argument present: name -> (the dict holding it, name)."""
    from _fuzz_cases import _Arr
    out = {}
    for where in (call.tensors, call.kwargs):
        for name, v in where.items():
            if isinstance(v, _Arr):
                out[name] = (where, name)
    return out


def mutate(call: Any, mutation: list, cfg: dict) -> str:
    """Applies ``mutation`` to ``call`` in place; returns what was done. Falls back to an
    attribute-range or rank mutation when the chosen kind does not apply to this call."""
    from _fuzz_cases import _Arr
    kind, a, b = mutation
    graph = cfg.get("_graph", False)
    tensors = _tensors(call)
    names = sorted(tensors)
    attrs = [n for n in call.kwargs if n in _ATTR_TYPES]
    if kind == "dim":
        pairs = [(n, d) for n, d in _CONSTRAINED[call.op] if n in tensors and len(tensors[n][0][n].a.shape) >= -d]
        if pairs:
            name, d = pairs[a % len(pairs)]
            holder = tensors[name][0]
            arr = holder[name].a
            shape = list(arr.shape)
            shape[d] += 1 + b % 3
            holder[name] = _Arr(np.resize(arr, shape), holder[name].dtype)
            return f"{name} dim {d} -> shape {shape}"
        kind = "rank"
    if kind == "dtype":
        name = names[a % len(names)]
        holder = tensors[name][0]
        bad = _BAD_INT_DTYPES if name in _INT_ARGS else _BAD_FLOAT_DTYPES
        if name == "weights":  # weights may be float32 whatever the other dtype is
            bad = tuple(x for x in bad if x != "float32")
        dt = bad[b % len(bad)]
        arr = holder[name].a
        holder[name] = _Arr(np.asarray(arr).astype(np.float64) if dt != "bool" else np.asarray(arr) != 0, dt)
        if dt in ("int8", "uint8", "int16", "int32", "int64"):
            holder[name] = _Arr(np.clip(np.nan_to_num(np.asarray(arr, np.float64)), 0, 100).astype(dt), dt)
        return f"{name} as {dt}"
    if kind == "attr_type" and attrs:
        name = attrs[a % len(attrs)]
        wrong = _WRONG_TYPE[_ATTR_TYPES[name]]
        if graph:  # MindSpore's graph parser turns a bytes constant into a str before any op code runs
            wrong = [v for v in wrong if not isinstance(v, bytes)]
        call.kwargs[name] = wrong[b % len(wrong)]
        return f"attribute {name} = {call.kwargs[name]!r}"
    if kind in ("attr_type", "attr_range") and attrs:
        name = attrs[a % len(attrs)]
        t = _ATTR_TYPES[name]
        if t == "bool":
            name = next((n for n in attrs if _ATTR_TYPES[n] != "bool"), name)
            t = _ATTR_TYPES[name]
        values = _OUT_OF_RANGE.get(t, []) + _INT_ATTR_BAD.get(name, [])
        if graph:  # MindSpore's graph parser itself fails on ints beyond int64 (no op name possible)
            values = [v for v in values if not (isinstance(v, int) and abs(v) >= 2**63)]
        if t == "str" and name == "mode":
            values = [v for v in values if v not in ("atb", "vjp")]
        call.kwargs[name] = values[b % len(values)]
        return f"attribute {name} = {call.kwargs[name]!r}"
    if kind == "lengths":
        done = _bad_lengths(call, cfg, a, b)
        if done:
            return done
        kind = "rank"
    index_args = [n for n in names if n.endswith("sparse_indices")]
    if kind == "indices" and index_args:
        from _fuzz_cases import valid_rows
        name = index_args[b % len(index_args)]
        holder = tensors[name][0]
        idx = holder[name].a.copy()
        # a padding row (BSND, or sparse_flash_mla's unused rows) is never read: no error there
        rows = np.asarray(cfg["_rows"], int) if "_rows" in cfg else valid_rows(cfg)
        per_row = idx.size // max(int(np.prod(idx.shape[:-2])), 1)
        if idx.size and rows.size:
            flat = idx.reshape(-1)
            at = int(rows[a % rows.size]) * per_row + b % per_row
            flat[at] = (-2 - b % 5) if b % 2 else 10**6 + b
            holder[name] = _Arr(idx, "int32")
            return f"{name}[{at}] = {flat[at]}"
    if kind == "pair":
        # BSND lengths may be given alone (docs/contract.md section 0.3): only TND's must be paired.
        lq = "actual_seq_lengths_query"
        lengths = () if call.kwargs.get("layout") == "BSND" else ((lq, "actual_seq_lengths_kv"),
                                                                  (lq, "actual_seq_lengths_key"))
        for x, y in (("query_rope", "key_rope"), *lengths):
            if x in call.kwargs and y in call.kwargs and (call.kwargs[x] is None) == (call.kwargs[y] is None):
                if call.kwargs[x] is not None:
                    call.kwargs[y if b % 2 else x] = None
                    return f"{y if b % 2 else x} = None alone"
    # rank (also the fallback)
    name = names[a % len(names)]
    holder = tensors[name][0]
    arr = np.asarray(holder[name].a)
    new = arr.reshape(*arr.shape, 1) if b % 3 == 0 else (arr.reshape(-1)[:1].reshape(()) if b % 3 == 1 or
                                                            arr.ndim == 1 else arr.reshape(-1, *arr.shape[2:]))
    holder[name] = _Arr(new, holder[name].dtype)
    return f"{name} rank {arr.ndim} -> shape {list(new.shape)}"


def _bad_lengths(call: Any, cfg: dict, a: int, b: int) -> str | None:
    """Lengths whose values break the rule (as a Python list: ValueError; as a tensor: the kernel's
    RuntimeError)."""
    from _fuzz_cases import _Arr
    if call.op in ("rope", "rope_grad"):
        lens = list(cfg["lens"])
        i = a % len(lens)
        choice = b % 4
        if choice == 0:
            lens[i] = 0
        elif choice == 1:
            lens[i] = cfg["max_seq_len"] + 1
        elif choice == 2:
            lens.append(1)
        else:
            lens[i] += 2**32
        as_tensor = cfg["lens_as"] != "list" or choice == 3
        dt = "int64" if choice == 3 else cfg["lens_as"] if cfg["lens_as"] != "list" else "int32"
        call.kwargs.pop("q_seq_len", None)
        call.tensors.pop("q_seq_len", None)
        if as_tensor:
            call.tensors["q_seq_len"] = _Arr(np.asarray(lens, dt), dt)
        else:
            call.kwargs["q_seq_len"] = lens
        return f"q_seq_len = {lens}"
    if call.op.startswith("sparse_flash_mla"):
        return _bad_smla_lengths(call, a, b)
    keys = [k for k in call.kwargs if k.startswith("actual_seq_lengths_") and call.kwargs[k] is not None]
    if not keys:
        return None
    name = keys[a % len(keys)]
    v = call.kwargs[name]
    lens = list(np.asarray(v.a if isinstance(v, _Arr) else v))
    if cfg["layout"] == "BSND":   # per-batch lengths: outside [0, S]
        lens[b % len(lens)] = -1 - b % 2 if b % 3 == 0 else cfg["s1" if name.endswith("query") else "s2"] + 1 + b % 3
    elif b % 2 == 0:
        lens[-1] += 1 + b % 3          # last entry != token count
    else:
        lens = [lens[-1] + 1] + lens[1:] if len(lens) > 1 else [lens[0] + 1]   # decreasing / wrong total
    call.kwargs[name] = _Arr(np.asarray(lens, v.dtype), v.dtype) if isinstance(v, _Arr) else lens
    return f"{name} = {lens}"


def _bad_smla_lengths(call: Any, a: int, b: int) -> str | None:
    """sparse_flash_mla(_grad)'s CANN lengths (docs/contract.md section 8): a cumulative cu_seqlens_* whose last
    entry is not the source's row count or that decreases; a seqused_* entry below 0 or beyond its batch's rows."""
    from _fuzz_cases import _Arr
    keys = sorted(k for k in call.kwargs if k.startswith(("cu_seqlens_", "seqused_")) and call.kwargs[k] is not None)
    if not keys:
        return None
    name = keys[a % len(keys)]
    lens = [int(x) for x in call.kwargs[name].a]
    i = b % len(lens)
    if name.startswith("seqused_"):
        lens[i] = -1 if b % 2 else 10**6
    elif b % 2 == 0 or len(lens) < 3:
        lens[-1] += 1 + b % 3
    else:
        lens[1] = lens[-1] + 1          # decreasing afterwards
    call.kwargs[name] = _Arr(np.asarray(lens, np.int32), "int32")
    return f"{name} = {lens}"
