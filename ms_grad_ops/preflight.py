"""Host-side checks of a batch's indices and lengths before a training step (docs/troubleshooting.md).

In GRAPH mode a kernel-time error (an index out of range, lengths that do not add up) ends the step
with a ``RuntimeError`` and leaves the compiled network refusing every later call, valid inputs
included (MindSpore's behaviour). A loop that calls these checks on a batch first can skip a bad
batch and train on: each raises a ``ValueError`` carrying the kernel's own message before any graph
runs.

The checks are the kernels' own: each runs the CPU kernel that reads these values on a proxy of the
batch with one channel of zeros (the batch's indices and lengths, the other tensors ``[..., 1]``), in
PyNative whatever the context's mode (an eager call does not touch a compiled graph), so there is
one copy of the rules: ``cpu/seq_lengths.cc`` for the lengths (docs/contract.md section 0.3, read
the same way by every attention and indexer op) and the index check of
``cpu/sparse_flash_attention_common.cc`` (section 0.5; the indexer ops' rule is the same with a
block size of 1), ``cpu/rope_common.cc`` for rope's lengths. ``MGO_CANN_STRICT=1`` adds its rules
(section 0.12) here as in the kernels. The cost is a gather over the batch's ``T1 x K`` indices (or
its tokens), with one multiply-add per selected key: small beside a step.

CPU kernels: the checks need a CPU device target (where the kernels report these errors; the Ascend
kernels skip a bad index without reporting it, docs/contract.md section 0.5).
"""
from __future__ import annotations

import re
from collections.abc import Sequence

import mindspore as ms
import numpy as np
from mindspore import Tensor

from . import ops

__all__ = ["check_indices", "check_lengths", "check_rope_lengths"]

Lengths = Sequence[int] | np.ndarray | Tensor | None
# MindSpore wraps a kernel's message: "... operator failed when executing user defined file <so>! Error
# message is <the kernel's message>" followed by its own call stack.
_KERNEL_MESSAGE = re.compile(r"Error message is (.*)")


def _tensor(value: object, dtype: type) -> Tensor:
    return value if isinstance(value, Tensor) else Tensor(np.asarray(value).astype(dtype))


def _lengths(value: Lengths) -> Tensor | None:
    """Lengths as an int tensor, so the kernel (not the eager Python check of list lengths) reads them;
    int64 keeps every value as given."""
    return None if value is None else _tensor(value, np.int64)


def _run(fn: object) -> None:
    """Runs ``fn`` eagerly (PyNative) and waits for its kernels; a kernel error becomes a ``ValueError``
    with the kernel's message."""
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        for out in fn():
            if out is not None:
                out.asnumpy()
    except RuntimeError as e:
        found = _KERNEL_MESSAGE.search(str(e))
        raise ValueError(found.group(1).strip() if found else str(e)) from None
    finally:
        ms.set_context(mode=mode)


def check_indices(sparse_indices: np.ndarray | Tensor, actual_seq_lengths_query: Lengths = None,
                  actual_seq_lengths_kv: Lengths = None, *, key_tokens: int, layout: str = "BSND",
                  sparse_mode: int = 3, sparse_block_size: int = 1) -> None:
    """Checks a batch's ``sparse_indices`` and lengths as the kernels will; ``ValueError`` with the
    kernel's message when they would fail.

    Args:
        sparse_indices: int ``[T1, N2, K]`` (TND) or ``[B, S1, N2, K]`` (BSND): block indices local to
            each batch, -1 unused (docs/contract.md section 0.5). For the indexer ops (token indices,
            ``[.., 1, K]``) keep ``sparse_block_size`` 1.
        actual_seq_lengths_query, actual_seq_lengths_kv: as the ops take them (section 0.3): Python
            sequences, NumPy arrays or int tensors; TND cumulative, BSND per batch; None = none.
        key_tokens: the key side's token count, T2 (TND) or S2 (BSND).
        layout, sparse_mode, sparse_block_size: the op's attributes.
    """
    idx = _tensor(sparse_indices, np.int32)
    lead, n2 = idx.shape[:-2], idx.shape[-2]
    key_lead = (key_tokens,) if layout == "TND" else (lead[0], key_tokens)
    query = Tensor(np.zeros((*lead, n2, 1), np.float32))
    key = Tensor(np.zeros((*key_lead, n2, 1), np.float32))
    _run(lambda: ops.sparse_flash_attention(
        query, key, None, idx, None, None, _lengths(actual_seq_lengths_query), _lengths(actual_seq_lengths_kv),
        scale_value=1.0, sparse_block_size=sparse_block_size, layout=layout, sparse_mode=sparse_mode))


def check_lengths(actual_seq_lengths_query: Lengths = None, actual_seq_lengths_kv: Lengths = None, *,
                  query_tokens: int | tuple[int, int], key_tokens: int, layout: str = "BSND") -> None:
    """Checks a batch's lengths (docs/contract.md section 0.3) as every attention and indexer kernel
    reads them; ``ValueError`` with the kernel's message when they would fail.

    Args:
        actual_seq_lengths_query, actual_seq_lengths_kv: TND cumulative (both or neither), BSND per
            batch (either alone); Python sequences, NumPy arrays or int tensors.
        query_tokens: T1 (TND) or ``(B, S1)`` (BSND). key_tokens: T2 (TND) or S2 (BSND).
        layout: "BSND" or "TND".
    """
    lead = (query_tokens,) if layout == "TND" else tuple(query_tokens)
    check_indices(np.full((*lead, 1, 1), -1, np.int32), actual_seq_lengths_query, actual_seq_lengths_kv,
                  key_tokens=key_tokens, layout=layout, sparse_mode=0)


def check_rope_lengths(q_seq_len: Sequence[int] | np.ndarray | Tensor, *, n_tokens: int, max_seq_len: int) -> None:
    """Checks ``rope``/``rope_grad``'s per-sequence lengths (docs/contract.md section 1) against the
    ``n_tokens`` packed tokens and cos/sin tables of ``max_seq_len`` rows, as their kernels do;
    ``ValueError`` with the kernel's message."""
    x, table = Tensor(np.zeros((n_tokens, 128), np.float32)), Tensor(np.zeros((max_seq_len, 128), np.float32))
    _run(lambda: ops.rope(x, x, table, table, _tensor(q_seq_len, np.int64)))
