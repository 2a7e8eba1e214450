"""``nn.DSAttention`` refuses a sequence longer than
``max_seq_len``, the length of the layer's rope tables, with a ``ValueError`` naming the Cell,
``max_seq_len`` and the length (not MindSpore's ``Gather`` index error or a ``Mul`` broadcast error
deep inside the layer): in PyNative when the layer runs; in GRAPH mode at compile time where the
length is a shape or a Python value, and from the running graph where it is a tensor value or a
dynamic dim (docs/troubleshooting.md)."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor

import ms_grad_ops as mgo

CFG = {"dim": 20, "n_heads": 2, "q_lora_rank": 12, "kv_lora_rank": 10, "qk_nope_head_dim": 6,
       "qk_rope_head_dim": 4, "v_head_dim": 5, "index_n_heads": 3, "index_head_dim": 8, "index_topk": 3}
MAX = 8


def _x(*shape: int) -> Tensor:
    return Tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32))


def _int32(values: list[int]) -> Tensor:
    return Tensor(np.array(values, np.int32))


# (layout, x shape, lengths, what the message names): each one sequence of 9 tokens (MAX + 1)
TOO_LONG = [
    ("BSND", (2, MAX + 1, 20), None, "the padded length S of x"),
    ("BSND", (2, MAX + 1, 20), [3, 4], "the padded length S of x"),       # short valid lengths: S still read
    ("TND", (MAX + 1, 20), None, "one sequence of all T tokens"),
    ("TND", (12, 20), [3, 12], "the longest sequence of actual_seq_lengths"),
    ("TND", (12, 20), _int32([3, 12]), "the longest sequence of actual_seq_lengths"),
]


@pytest.fixture(params=["pynative", "graph"])
def mode(request: pytest.FixtureRequest) -> str:
    ms.set_context(mode=ms.GRAPH_MODE if request.param == "graph" else ms.PYNATIVE_MODE)
    yield request.param
    ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.mark.parametrize(("layout", "shape", "lengths", "what"), TOO_LONG)
def test_a_sequence_longer_than_max_seq_len_is_a_value_error(mode: str, layout: str, shape: tuple, lengths: object,
                                                             what: str) -> None:
    layer = mgo.nn.DSAttention(**CFG, max_seq_len=MAX, layout=layout)
    with pytest.raises(ValueError, match=rf"DSAttention: {what}.* has {MAX + 1} tokens, more than "
                                         rf"max_seq_len = {MAX}"):
        layer(_x(*shape), lengths)


@pytest.mark.parametrize(("layout", "shape", "lengths"), [
    ("BSND", (2, MAX, 20), None), ("TND", (MAX, 20), None), ("TND", (12, 20), _int32([4, 12])),
    ("TND", (12, 20), [4, 12])])
def test_sequences_of_max_seq_len_tokens_run(layout: str, shape: tuple, lengths: object) -> None:
    layer = mgo.nn.DSAttention(**CFG, max_seq_len=MAX, layout=layout)
    out, loss = layer(_x(*shape), lengths)
    assert out.shape == shape and np.isfinite(out.asnumpy()).all() and np.isfinite(loss.asnumpy()).all()


def test_dynamic_shape_in_graph_mode_raises_when_the_graph_runs() -> None:
    """A dynamic S is known only when the graph runs: MindSpore raises the layer's ValueError then."""
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        layer = mgo.nn.DSAttention(**CFG, max_seq_len=MAX, layout="BSND")
        layer.set_inputs(Tensor(shape=[2, None, 20], dtype=ms.float32))
        assert layer(_x(2, MAX, 20))[0].shape == (2, MAX, 20)
        with pytest.raises(ValueError, match=rf"DSAttention: the padded length S of x .* has {MAX + 1} tokens, "
                                             rf"more than max_seq_len = {MAX}"):
            layer(_x(2, MAX + 1, 20))
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)

