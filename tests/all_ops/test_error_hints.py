"""Errors that say what was most likely meant (issue 43): a wrong rank in the layout-dependent
tensors names the layout and the other one (BSND is the default, so 3-D tensors without
``layout="TND"`` are the common case); rope's length errors say its lengths are per sequence, with
their per-sequence form when the values look cumulative (the attention ops' convention), from the
Python check and the kernel alike; a number where a tensor belongs is a ``TypeError`` naming the
argument, with the hint that ``scale_value`` is keyword-only here (MindSpore's signature takes it
positionally; ``ms_grad_ops.builtins`` has that signature)."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor

import ms_grad_ops as mgo

BSND_HINT = r'must be 4-D \(layout "BSND"; pass layout="TND" for \[T, N, D\] tensors\)'
TND_HINT = r'must be 3-D \(layout "TND"; pass layout="BSND" for \[B, S, N, D\] tensors\)'
PER_SEQUENCE = r"\(rope's q_seq_len are per-sequence lengths, not cumulative like the attention ops' actual_seq_lengths"


def _t(*shape: int, dtype: type = np.float32) -> Tensor:
    return Tensor(np.zeros(shape, dtype))


def _int32(values: list[int]) -> Tensor:
    return Tensor(np.array(values, np.int32))


def _sync(outs: tuple) -> None:
    """Waits for the kernels (PyNative runs them asynchronously): their errors surface here."""
    for o in outs:
        o.asnumpy()


@pytest.fixture(params=["pynative", "graph"])
def mode(request: pytest.FixtureRequest) -> str:
    ms.set_context(mode=ms.GRAPH_MODE if request.param == "graph" else ms.PYNATIVE_MODE)
    yield request.param
    ms.set_context(mode=ms.PYNATIVE_MODE)


def _call(mode: str, fn: object, *args: Tensor, **kwargs: object) -> object:
    if mode == "graph":
        class Net(ms.nn.Cell):
            def construct(self, *xs: Tensor) -> object:
                return fn(*xs, **kwargs)
        return Net()(*args)
    return fn(*args, **kwargs)


def test_3d_tensors_without_layout_tnd(mode: str) -> None:
    with pytest.raises(ValueError, match=rf"lightning_indexer: argument 'query_index' {BSND_HINT}, "
                                         r"got shape \[12, 2, 16\]"):
        _call(mode, mgo.ops.lightning_indexer, _t(12, 2, 16), _t(12, 1, 16), _t(12, 2), sparse_count=4)
    with pytest.raises(ValueError, match=rf"sparse_flash_attention: argument 'query' {BSND_HINT}, "
                                         r"got shape \[6, 4, 8\]"):
        _call(mode, mgo.ops.sparse_flash_attention, _t(6, 4, 8), _t(6, 1, 8), _t(6, 1, 8),
              _t(6, 1, 2, dtype=np.int32), scale_value=0.5)


def test_4d_tensors_with_layout_tnd_name_bsnd() -> None:
    with pytest.raises(ValueError, match=rf"sparse_flash_attention_grad: argument 'query' {TND_HINT}"):
        mgo.ops.sparse_flash_attention_grad(
            _t(1, 6, 4, 8), _t(6, 1, 8), None, _t(6, 1, 2, dtype=np.int32), _t(6, 4, 8), _t(6, 4, 8), _t(1, 6, 4),
            _t(1, 6, 4), scale_value=0.5, layout="TND")
    with pytest.raises(ValueError, match=r"lightning_indexer: argument 'weights' must be 2-D \(layout \"TND\";"):
        mgo.ops.lightning_indexer(_t(12, 2, 16), _t(12, 1, 16), _t(1, 12, 2), sparse_count=4, layout="TND")


@pytest.mark.parametrize("op", ["rope", "rope_grad"])
@pytest.mark.parametrize("form", ["list", "int32", "int64"])
def test_rope_lengths_given_cumulative(op: str, form: str) -> None:
    """Cumulative [3, 5, 8, 11] of 11 tokens, max_seq_len 8: the per-sequence form is [3, 2, 3, 3]."""
    lens = [3, 5, 8, 11]
    arg = lens if form == "list" else Tensor(np.array(lens, getattr(np, form)))
    err = ValueError if form == "list" else RuntimeError       # a tensor's values: the kernel's check
    x, table = _t(11, 128), _t(8, 128)
    with pytest.raises(err, match=rf"{op}: q_seq_len\[3\] = 11 must be in \[1, max_seq_len = 8\] {PER_SEQUENCE}; "
                                  r"these look cumulative: per sequence they are \[3, 2, 3, 3\]\)"):
        _sync(getattr(mgo.ops, op)(x, x, table, table, arg))
    # within max_seq_len, cumulative lengths break the sum: [3, 5] of 5 tokens is [3, 2]
    x5 = _t(5, 128)
    with pytest.raises(err, match=rf"{op}: sum\(q_seq_len\) = 8 must equal n_tokens = 5 {PER_SEQUENCE}; these look "
                                  r"cumulative: per sequence they are \[3, 2\]\)"):
        _sync(getattr(mgo.ops, op)(x5, x5, table, table, [3, 5] if form == "list" else _int32([3, 5])))


def test_rope_lengths_that_do_not_look_cumulative() -> None:
    x, table = _t(11, 128), _t(8, 128)
    with pytest.raises(ValueError, match=rf"sum\(q_seq_len\) = 10 must equal n_tokens = 11 {PER_SEQUENCE}\)$"):
        mgo.ops.rope(x, x, table, table, [4, 3, 3])


def test_mindspores_positional_scale_value() -> None:
    """MindSpore's ``sparse_flash_attention(query, key, value, sparse_indices, scale_value, ...)``: here
    the fifth slot is query_rope; without scale_value=... Python itself names the missing keyword."""
    q, k, idx = _t(6, 4, 8), _t(6, 1, 8), _t(6, 1, 2, dtype=np.int32)
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'scale_value'"):
        mgo.ops.sparse_flash_attention(q, k, k, idx, 0.5, layout="TND")


def test_number_in_a_tensor_slot(mode: str) -> None:
    q, k, idx = _t(6, 4, 8), _t(6, 1, 8), _t(6, 1, 2, dtype=np.int32)

    def call(q: Tensor, k: Tensor, idx: Tensor) -> object:
        return mgo.ops.sparse_flash_attention(q, k, k, idx, 0.5, scale_value=0.5, layout="TND")
    with pytest.raises(TypeError, match=r"sparse_flash_attention: argument 'query_rope' must be a mindspore Tensor, "
                                        r"got float 0.5 \(a number here looks like a positional scale_value: "
                                        r"scale_value is keyword-only here, scale_value=...; the MindSpore-signature "
                                        r"version is ms_grad_ops.builtins.sparse_flash_attention\)"):
        _call(mode, call, q, k, idx)
    with pytest.raises(TypeError, match=r"sparse_flash_attention_grad: argument 'sparse_indices' must be a mindspore "
                                        r"Tensor, got list \[\[0, 1\]\]$"):
        mgo.ops.sparse_flash_attention_grad(q, k, None, [[0, 1]], q, q, _t(1, 6, 4), _t(1, 6, 4), scale_value=0.5,
                                            layout="TND")
