"""``ms_grad_ops.preflight`` (docs/troubleshooting.md): a batch's indices and lengths checked on the
host before a step, with the kernel's own message (the very text the op's kernel gives when the same
batch reaches it), as a ``ValueError``; valid batches pass; a rejected batch leaves a compiled
GRAPH-mode network usable (what a kernel-time error inside it does not)."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, nn

import ms_grad_ops as mgo


def _kernel_message(fn: object) -> str:
    """The kernel's message for the call ``fn`` (PyNative): what follows MindSpore's "Error message is"."""
    with pytest.raises(RuntimeError) as info:
        for out in fn():
            if out is not None:
                out.asnumpy()
    text = str(info.value)
    return text.split("Error message is ", 1)[1].splitlines()[0].strip()


def _sfa(q_lead: tuple, k_lead: tuple, idx: np.ndarray, lq: object, lk: object, layout: str) -> object:
    q = Tensor(np.ones((*q_lead, 2, 4), np.float32))
    k = Tensor(np.ones((*k_lead, 1, 4), np.float32))
    lens = [None if v is None else Tensor(np.asarray(v, np.int32)) for v in (lq, lk)]
    return lambda: mgo.ops.sparse_flash_attention(q, k, None, Tensor(idx), None, None, *lens, scale_value=0.5,
                                                  layout=layout)


# (layout, query lead, key tokens, indices, lengths q, lengths kv): each bad in one way
TND_IDX = np.zeros((6, 1, 2), np.int32)
BAD = [
    ("TND", (6,), 6, np.where(np.arange(12).reshape(6, 1, 2) == 3, 4, 0).astype(np.int32), [3, 6], [3, 6]),
    ("TND", (6,), 6, TND_IDX, [3, 5], [3, 6]),                      # last query length != T1
    ("TND", (6,), 6, TND_IDX, [4, 3], [3, 6]),                      # decreasing
    ("BSND", (2, 3), 4, np.full((2, 3, 1, 2), 4, np.int32), None, None),   # index 4 of S2 = 4 keys
    ("BSND", (2, 3), 4, np.zeros((2, 3, 1, 2), np.int32), [3, 4], None),   # 4 query rows of S1 = 3
]


@pytest.mark.parametrize(("layout", "q_lead", "s2", "idx", "lq", "lk"), BAD)
def test_bad_batch_gets_the_kernels_message(layout: str, q_lead: tuple, s2: int, idx: np.ndarray, lq: object,
                                            lk: object) -> None:
    k_lead = (s2,) if layout == "TND" else (q_lead[0], s2)
    message = _kernel_message(_sfa(q_lead, k_lead, idx, lq, lk, layout))
    assert message.startswith("sparse_flash_attention: ")
    with pytest.raises(ValueError) as info:
        mgo.preflight.check_indices(idx, lq, lk, key_tokens=s2, layout=layout)
    assert str(info.value) == message


def test_valid_batches_pass() -> None:
    mgo.preflight.check_indices(np.array([[[0, -1]], [[1, 0]], [[0, 1]]], np.int32), [1, 3], [1, 3], key_tokens=3,
                                layout="TND")
    mgo.preflight.check_indices(np.full((2, 3, 1, 2), 3, np.int32), [3, 3], [4, 4], key_tokens=4, layout="BSND",
                                sparse_mode=0)
    mgo.preflight.check_lengths([2, 5], [1, 4], query_tokens=5, key_tokens=4, layout="TND")
    mgo.preflight.check_rope_lengths([3, 2], n_tokens=5, max_seq_len=3)


def test_lengths_and_rope_lengths() -> None:
    with pytest.raises(ValueError, match=r"^sparse_flash_attention: the last entry of actual_seq_lengths_kv \(5\) "
                                         r"must equal the number of tokens 4$"):
        mgo.preflight.check_lengths([2, 5], [1, 5], query_tokens=5, key_tokens=4, layout="TND")
    x, table = Tensor(np.zeros((11, 128), np.float32)), Tensor(np.zeros((8, 128), np.float32))
    lens = [3, 5, 8, 11]
    message = _kernel_message(lambda: mgo.ops.rope(x, x, table, table, Tensor(np.array(lens, np.int32))))
    with pytest.raises(ValueError) as info:
        mgo.preflight.check_rope_lengths(lens, n_tokens=11, max_seq_len=8)
    assert str(info.value) == message and "per sequence they are [3, 2, 3, 3]" in message


def test_a_rejected_batch_leaves_a_graph_usable() -> None:
    """In GRAPH mode: the check runs eagerly (the context's mode restored), the compiled network runs
    on after a rejected batch."""
    class Net(nn.Cell):
        def construct(self, q: Tensor, k: Tensor, idx: Tensor) -> Tensor:
            return mgo.ops.sparse_flash_attention(q, k, None, idx, scale_value=0.5, layout="TND")[0]

    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        net = Net()
        q, k = Tensor(np.ones((6, 2, 4), np.float32)), Tensor(np.ones((6, 1, 4), np.float32))
        first = net(q, k, Tensor(TND_IDX)).asnumpy()
        with pytest.raises(ValueError, match="sparse_indices value 9"):
            mgo.preflight.check_indices(np.full((6, 1, 2), 9, np.int32), key_tokens=6, layout="TND")
        assert ms.get_context("mode") == ms.GRAPH_MODE
        np.testing.assert_array_equal(net(q, k, Tensor(TND_IDX)).asnumpy(), first)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def test_dsattention_check_batch() -> None:
    cfg = {"dim": 20, "n_heads": 2, "q_lora_rank": 12, "kv_lora_rank": 10, "qk_nope_head_dim": 6,
           "qk_rope_head_dim": 4, "v_head_dim": 5, "index_n_heads": 3, "index_head_dim": 8, "index_topk": 3}
    tnd = mgo.nn.DSAttention(**cfg, max_seq_len=8, layout="TND")
    tnd.check_batch((12, 20), [4, 12])
    tnd.check_batch(Tensor(np.zeros((12, 20), np.float32)), Tensor(np.array([4, 12], np.int64)))
    with pytest.raises(ValueError, match=r"DSAttention: the longest sequence of actual_seq_lengths has 9 tokens, "
                                         r"more than max_seq_len = 8"):
        tnd.check_batch((12, 20), [3, 12])
    with pytest.raises(ValueError, match=r"^sparse_flash_attention: the last entry of actual_seq_lengths_query "
                                         r"\(11\) must equal the number of tokens 12$"):
        tnd.check_batch((12, 20), np.array([4, 11]))
    bsnd = mgo.nn.DSAttention(**cfg, max_seq_len=8, layout="BSND")
    bsnd.check_batch((2, 8, 20), [8, 0])
    with pytest.raises(ValueError, match=r"actual_seq_lengths_query\[1\] = 9 must be in \[0, 8\] in BSND layout"):
        bsnd.check_batch((2, 8, 20), [8, 9])
    with pytest.raises(ValueError, match="DSAttention: the padded length S of x"):
        bsnd.check_batch((2, 9, 20))
