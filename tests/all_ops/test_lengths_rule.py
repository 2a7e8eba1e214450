"""The one lengths rule of the attention and indexer ops (infer_shape/seq_lengths_rules.h, docs/contract.md
section 0.3): TND without lengths = one sequence of T1 queries and T2 keys, lengths cumulative, both or
neither; BSND lengths per batch, either alone (tests/all_ops/test_bsnd_lengths.py: padding rows)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from mindspore import Tensor

from ms_grad_ops import ops

T1, T2, N1, D, DR, NIDX, DIDX, K = 6, 8, 2, 8, 4, 2, 8, 3
LENGTHS_KW = {"sparse_flash_attention": "actual_seq_lengths_kv", "sparse_flash_attention_grad": "actual_seq_lengths_kv",
              "lightning_indexer": "actual_seq_lengths_key", "lightning_indexer_grad": "actual_seq_lengths_key",
              "sparse_lightning_indexer_grad_kl_loss": "actual_seq_lengths_key"}


def _inputs(layout: str) -> dict[str, Tensor]:
    """Random float32 inputs of every op; TND [T, N, D], BSND [1, S, N, D]."""
    rng = np.random.default_rng(0)
    lead_q, lead_k = ((T1,), (T2,)) if layout == "TND" else ((1, T1), (1, T2))

    def t(*shape: int) -> Tensor:
        return Tensor(rng.standard_normal(shape).astype(np.float32))

    idx = np.stack([rng.permutation(T2)[:K] for _ in range(T1)]).astype(np.int32).reshape(*lead_q, 1, K)
    return {"query": t(*lead_q, N1, D), "key": t(*lead_k, 1, D), "query_rope": t(*lead_q, N1, DR),
            "key_rope": t(*lead_k, 1, DR), "query_index": t(*lead_q, NIDX, DIDX), "key_index": t(*lead_k, 1, DIDX),
            "weights": t(*lead_q, NIDX), "sparse_indices": Tensor(idx), "d_out": t(*lead_q, N1, D)}


def _call(op: str, layout: str, lens_q: object, lens_k: object) -> tuple:
    x = _inputs(layout)
    kv = {LENGTHS_KW[op]: lens_k, "actual_seq_lengths_query": lens_q}
    attn = {"scale_value": 0.3, "layout": layout}
    if op == "lightning_indexer":
        return ops.lightning_indexer(x["query_index"], x["key_index"], x["weights"], sparse_count=K, layout=layout,
                                     **kv)
    if op == "lightning_indexer_grad":
        d_values = Tensor(np.linspace(-1, 1, T1 * K).astype(np.float32).reshape(x["sparse_indices"].shape))
        return ops.lightning_indexer_grad(x["query_index"], x["key_index"], x["weights"], x["sparse_indices"],
                                          d_values, layout=layout, **kv)
    if op == "sparse_flash_attention":
        return ops.sparse_flash_attention(x["query"], x["key"], None, x["sparse_indices"], x["query_rope"],
                                          x["key_rope"], **kv, **attn)
    # The statistics the other ops take (TND: one sequence, the same as lengths [T1], [T2]).
    out, smax, ssum = ops.sparse_flash_attention(x["query"], x["key"], None, x["sparse_indices"], x["query_rope"],
                                                 x["key_rope"], **attn)
    if op == "sparse_flash_attention_grad":
        grads = ops.sparse_flash_attention_grad(x["query"], x["key"], None, x["sparse_indices"], x["d_out"], out,
                                                smax, ssum, query_rope=x["query_rope"], key_rope=x["key_rope"],
                                                **kv, **attn)
        return tuple(g for g in grads if g is not None)
    return ops.sparse_lightning_indexer_grad_kl_loss(x["query"], x["key"], x["query_index"], x["key_index"],
                                                     x["weights"], x["sparse_indices"], smax, ssum, x["query_rope"],
                                                     x["key_rope"], **kv, **attn)


OPS = list(LENGTHS_KW)
ONE_SEQUENCE: list[tuple[str, Callable[[int], object]]] = [
    ("list", lambda n: [n]), ("int32", lambda n: Tensor(np.array([n], np.int32))),
    ("int64", lambda n: Tensor(np.array([n], np.int64)))]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("kind,lengths", ONE_SEQUENCE, ids=[k for k, _ in ONE_SEQUENCE])
def test_tnd_without_lengths_is_one_sequence(op: str, kind: str, lengths: Callable[[int], object]) -> None:
    without = _call(op, "TND", None, None)
    with_lengths = _call(op, "TND", lengths(T1), lengths(T2))
    assert len(without) == len(with_lengths)
    for a, b in zip(without, with_lengths):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("kind,lengths", ONE_SEQUENCE, ids=[k for k, _ in ONE_SEQUENCE])
def test_bsnd_full_lengths_are_no_lengths(op: str, kind: str, lengths: Callable[[int], object]) -> None:
    # BSND lengths are per batch (docs/contract.md section 0.3): the full S1 / S2, or either alone
    # (the other absent: full), is the call without lengths.
    without = _call(op, "BSND", None, None)
    for lens_q, lens_k in ((lengths(T1), lengths(T2)), (lengths(T1), None), (None, lengths(T2))):
        got = _call(op, "BSND", lens_q, lens_k)
        assert len(without) == len(got)
        for a, b in zip(without, got):
            np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())


@pytest.mark.parametrize("op", OPS)
def test_bsnd_lengths_are_valid_lengths_of_each_batch(op: str) -> None:
    with pytest.raises(ValueError, match=rf"^{op}: actual_seq_lengths_query\[0\] = {T1 + 1} must be in "
                                         rf"\[0, {T1}\] in BSND layout"):
        _call(op, "BSND", [T1 + 1], [T2])
    with pytest.raises(RuntimeError, match=rf"{op}: {LENGTHS_KW[op]}\[0\] = -1 must be in \[0, {T2}\] in BSND"):
        for out in _call(op, "BSND", Tensor(np.array([T1], np.int32)), Tensor(np.array([-1], np.int32))):
            out.asnumpy()  # PyNative runs the kernel asynchronously: its error surfaces here
    with pytest.raises(ValueError, match=rf"^{op}: argument '{LENGTHS_KW[op]}' dim 0 must be the batch size B"):
        _call(op, "BSND", None, [T2, T2])


@pytest.mark.parametrize("op", OPS)
def test_lengths_both_or_neither(op: str) -> None:
    with pytest.raises(ValueError, match=rf"^{op}: arguments 'actual_seq_lengths_query' and '{LENGTHS_KW[op]}' "
                                         r"must both be given or both be None"):
        _call(op, "TND", [T1], None)
