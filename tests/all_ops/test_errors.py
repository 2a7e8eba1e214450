"""Every validation path: error type and message (op, argument, shapes), never a crash."""
from __future__ import annotations

import inspect
import re

import mindspore as ms
import numpy as np
import pytest
from _util import Fn, OpCell
from mindspore import Tensor

import ms_grad_ops as mgo
from ms_grad_ops._specs import OP_SPECS


def t(shape: tuple[int, ...], dtype: ms.dtype = ms.float32) -> Tensor:
    return Tensor(np.ones(shape, np.float32), dtype)


def lens_t(values: list[int], dtype: type = np.int32) -> Tensor:
    return Tensor(np.array(values, dtype))


# rope_grad(q_grad, k_grad, cos, sin, q_seq_len): each case breaks one rule.
ROPE_CASES = [
    (dict(q_grad=t((11,))), ValueError, r"rope_grad: argument 'q_grad' must be 2-D, got shape \[11\]"),
    (dict(k_grad=t((11, 128))), ValueError, r"argument 'k_grad' must have the shape of 'q_grad' \[11, 256\], got \[11, 128\]"),
    (dict(q_grad=t((11, 200)), k_grad=t((11, 200))), ValueError, r"hidden size must be a multiple of 128, got shape \[11, 200\]"),
    (dict(cos=t((4, 64)), sin=t((4, 64))), ValueError, r"argument 'cos' dim 1 must be head size = 128, got shape \[4, 64\]"),
    (dict(cos=t((4, 128, 1))), ValueError, r"argument 'cos' must be 2-D"),
    (dict(sin=t((5, 128))), ValueError, r"argument 'sin' must have the shape of 'cos' \[4, 128\], got \[5, 128\]"),
    (dict(q_seq_len=Tensor(np.ones((2, 2), np.int32))), ValueError, r"argument 'q_seq_len' must be 1-D"),
    (dict(q_grad=t((0, 256)), k_grad=t((0, 256)), q_seq_len=[1]), ValueError, r"argument 'q_grad' must not be empty, got shape \[0, 256\]"),
    (dict(q_grad=t((11, 256), ms.int32)), TypeError, r"argument 'q_grad' must be float16, bfloat16 or float32, got int32"),
    (dict(k_grad=t((11, 256), ms.float16)), TypeError, r"argument 'k_grad' must have the dtype of 'q_grad' \(float32\), got float16"),
    (dict(cos=t((4, 128), ms.int32)), TypeError, r"argument 'cos' must be float16, bfloat16 or float32, got int32"),
    (dict(sin=t((4, 128), ms.float16)), TypeError, r"argument 'sin' must have the dtype of 'cos' \(float32\), got float16"),
    (dict(q_seq_len=Tensor(np.array([2.0, 9.0], np.float32))), TypeError, r"argument 'q_seq_len' must be int32 or int64, got float32"),
    (dict(q_seq_len=[2, 1, 4, 3]), ValueError, r"rope_grad: sum\(q_seq_len\) = 10 must equal n_tokens = 11"),
    (dict(q_seq_len=[2, 0, 4, 5]), ValueError, r"rope_grad: q_seq_len\[1\] = 0 must be in \[1, max_seq_len = 4\]"),
    (dict(q_seq_len=[2, 5, 4]), ValueError, r"rope_grad: q_seq_len\[1\] = 5 must be in \[1, max_seq_len = 4\]"),
    (dict(q_seq_len=[]), ValueError, r"argument 'q_seq_len' must be a non-empty 1-D list"),
    (dict(q_seq_len=[2.0, 9.0]), TypeError, r"argument 'q_seq_len' must hold integers, got float64"),
    (dict(q_seq_len="2,9"), TypeError, r"argument 'q_seq_len' must be a sequence of ints or an int tensor, got str"),
    (dict(q_seq_len=None), TypeError, r"argument 'q_seq_len' must be a sequence of ints or an int tensor, got NoneType"),
    (dict(q_grad=np.ones((11, 256), np.float32)), TypeError, r"rope_grad: argument 'q_grad' must be a mindspore Tensor, got ndarray"),
    (dict(mode="grad"), ValueError, r"rope_grad: attribute 'mode' must be one of \"atb\", \"vjp\", got \"grad\""),
]


def _rope_args(**over: object) -> dict:
    args = dict(q_grad=t((11, 256)), k_grad=t((11, 256)), cos=t((4, 128)), sin=t((4, 128)), q_seq_len=[2, 1, 4, 4])
    args.update(over)
    return args


@pytest.mark.parametrize("override,exc,match", ROPE_CASES)
def test_rope_grad_rejects(override: dict, exc: type, match: str) -> None:
    args = _rope_args(**override)
    mode = args.pop("mode", "atb")
    with pytest.raises(exc, match=match):
        mgo.ops.rope_grad(*args.values(), mode=mode)


def test_rope_forward_names_its_own_arguments() -> None:
    with pytest.raises(ValueError, match=r"rope: argument 'k' must have the shape of 'q'"):
        mgo.ops.rope(t((3, 128)), t((3, 256)), t((4, 128)), t((4, 128)), [3])


@pytest.mark.parametrize("lens,match", [
    ([2, 1, 4, 3], r"rope_grad: sum\(q_seq_len\) = 10 must equal n_tokens = 11"),
    ([2, 0, 4, 5], r"rope_grad: q_seq_len\[1\] = 0 must be in \[1, max_seq_len = 4\]"),
    ([2, 5, 4], r"rope_grad: q_seq_len\[1\] = 5 must be in \[1, max_seq_len = 4\]"),
    ([-1, 12], r"rope_grad: q_seq_len\[0\] = -1 must be in"),
])
@pytest.mark.parametrize("int_dtype", [np.int32, np.int64])
def test_malformed_length_tensor_is_a_runtime_error_not_a_crash(exec_mode: str, lens: list[int], match: str,
                                                                int_dtype: type) -> None:
    args = list(_rope_args(q_seq_len=lens_t(lens, int_dtype)).values())
    fn = Fn(mgo.ops.rope_grad) if exec_mode == "graph" else mgo.ops.rope_grad
    with pytest.raises(RuntimeError, match=match):
        out = fn(*args)
        out[0].asnumpy()


@pytest.mark.parametrize("op", ["rope", "rope_grad"])
def test_int64_lengths_beyond_int32_are_not_wrapped(exec_mode: str, op: str) -> None:
    """2**32 + 2 must not be read as 2: [2, 1, 4, 4] would be valid."""
    args = list(_rope_args(q_seq_len=lens_t([2**32 + 2, 1, 4, 4], np.int64)).values())
    fn = getattr(mgo.ops, op)
    with pytest.raises(RuntimeError, match=rf"{op}: q_seq_len\[0\] = 4294967298 must be in \[1, max_seq_len = 4\]"):
        out = (Fn(fn) if exec_mode == "graph" else fn)(*args)
        out[0].asnumpy()


def test_int64_lengths_saturate_where_the_kernel_reads_int32(monkeypatch: pytest.MonkeyPatch) -> None:
    """On Ascend (int32 lengths) a value beyond int32 becomes INT32_MAX or INT32_MIN, never a valid length."""
    from ms_grad_ops import _checks
    monkeypatch.setattr(_checks, "reads_int64", lambda op, arg: False)
    got = _checks.kernel_lengths("rope", "q_seq_len", lens_t([2**32 + 2, -2**32 + 3, 4], np.int64))
    assert got.dtype == ms.int32 and got.asnumpy().tolist() == [2**31 - 1, -2**31, 4]


def test_attributes_are_taken_by_keyword_and_returned_in_spec_order() -> None:
    from ms_grad_ops._checks import attributes
    got = attributes("lightning_indexer", sparse_mode=0, cmp_ratio=1, layout="TND", sparse_count=4)
    assert list(got.items()) == [("sparse_count", 4), ("layout", "TND"), ("sparse_mode", 0), ("cmp_ratio", 1)]
    with pytest.raises(TypeError, match=r"^lightning_indexer: expected the attributes \['sparse_count', 'layout', "
                                        r"'sparse_mode', 'cmp_ratio'\] by keyword, got unknown \[\], missing "
                                        r"\['sparse_mode'\]$"):
        attributes("lightning_indexer", sparse_count=4, layout="TND", cmp_ratio=1)
    with pytest.raises(TypeError, match=r"^rope_grad: expected .* got unknown \['scale'\], missing \[\]$"):
        attributes("rope_grad", mode="vjp", scale=1.0)


def _cla(**over: object) -> list:
    args = dict(g=t((5, 3, 8)), og=t((5, 3, 8)), ol=t((5, 3, 8)), zg=t((5, 3)), zl=t((5, 3)))
    args.update(over)
    return list(args.values())


CLA_CASES = [
    (dict(og=t((5, 24))), ValueError, r"cla_gate_backward: argument 'global_attn' must be 3-D, got shape \[5, 24\]"),
    (dict(ol=t((5, 3, 9))), ValueError, r"argument 'local_attn' must have the shape of 'global_attn' \[5, 3, 8\], got \[5, 3, 9\]"),
    (dict(g=t((5, 2, 8))), ValueError, r"argument 'grad_merged' must have the shape of 'global_attn'"),
    (dict(zg=t((5, 3, 1))), ValueError, r"argument 'global_gate_logits' must be 2-D"),
    (dict(zg=t((4, 3)), zl=t((4, 3))), ValueError, r"argument 'global_gate_logits' dim 0 must be T of global_attn = 5, got shape \[4, 3\]"),
    (dict(zg=t((5, 2)), zl=t((5, 2))), ValueError, r"argument 'global_gate_logits' dim 1 must be N of global_attn = 3"),
    (dict(zl=t((5, 2))), ValueError, r"argument 'local_gate_logits' must have the shape of 'global_gate_logits'"),
    (dict(og=t((0, 3, 8)), ol=t((0, 3, 8)), g=t((0, 3, 8)), zg=t((0, 3)), zl=t((0, 3))), ValueError,
     r"argument 'global_attn' must not be empty"),
    (dict(og=t((5, 3, 8), ms.int32)), TypeError, r"argument 'global_attn' must be float16, bfloat16 or float32, got int32"),
    (dict(ol=t((5, 3, 8), ms.float16)), TypeError, r"argument 'local_attn' must have the dtype of 'global_attn' \(float32\)"),
    (dict(zg=t((5, 3), ms.bfloat16)), TypeError, r"argument 'global_gate_logits' must have the dtype of 'global_attn'"),
    (dict(zl=t((5, 3), ms.float16)), TypeError, r"argument 'local_gate_logits' must have the dtype of 'global_attn'"),
    (dict(g=t((5, 3, 8), ms.float16)), TypeError, r"argument 'grad_merged' must have the dtype of 'global_attn'"),
]


@pytest.mark.parametrize("override,exc,match", CLA_CASES)
def test_cla_gate_backward_rejects(override: dict, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        mgo.ops.cla_gate_backward(*_cla(**override))


def test_cla_gate_backward_rejects_layouts_other_than_tnd() -> None:
    with pytest.raises(ValueError, match=r"cla_gate_backward: attribute 'input_attn_layout' must be one of \"TND\", "
                                         r"got \"BSND\""):
        mgo.ops.cla_gate_backward(*_cla(), input_attn_layout="BSND")


def test_cla_gate_merge_names_its_own_op() -> None:
    with pytest.raises(ValueError, match=r"cla_gate_merge: argument 'local_attn' must have the shape of 'global_attn'"):
        mgo.ops.cla_gate_merge(t((5, 3, 8)), t((5, 3, 7)), t((5, 3)), t((5, 3)))


def test_graph_mode_raises_value_error_at_compile(exec_mode: str) -> None:
    fn = Fn(mgo.ops.cla_gate_merge) if exec_mode == "graph" else mgo.ops.cla_gate_merge
    with pytest.raises(ValueError, match=r"cla_gate_merge: argument 'global_gate_logits' dim 0 must be T"):
        fn(t((5, 3, 8)), t((5, 3, 8)), t((4, 3)), t((4, 3)))


def test_unknown_attribute_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"rope_grad: unknown attribute\(s\) \['scale'\]"):
        mgo._custom.primitive("rope_grad", mode="atb", scale=1.0)


# --- issue 13: dtypes that skip no check, exact attribute types and ranges, rank errors first ---
# Each case: (op, positional tensors, keyword arguments); GRAPH mode passes the tensors as graph inputs.

def _modes(cases: list, graph: set[int]) -> list:
    """Every case in PyNative; the cases at indices ``graph`` also in GRAPH mode (a GRAPH-mode
    error costs a compile, 2-6 s here, so one representative per rule and op family)."""
    return [pytest.param("pynative", *c, id=f"pynative-{i}") for i, c in enumerate(cases)] + \
        [pytest.param("graph", *cases[i], id=f"graph-{i}") for i in sorted(graph)]


def _run(exec_mode: str, op: object, tensors: list, kwargs: dict) -> object:
    if exec_mode == "graph":
        ms.set_context(mode=ms.GRAPH_MODE)
        try:
            return OpCell(op, kwargs)(*tensors)
        finally:
            ms.set_context(mode=ms.PYNATIVE_MODE)
    return op(*tensors, **kwargs)


def _case(op_name: str, **over: object) -> tuple:
    """A valid small TND call of ``op_name`` with ``over`` replacing arguments (by name)."""
    idx = Tensor(np.full((4, 1, 3), -1, np.int32))
    tables = {
        "rope_grad": ([("q_grad", t((11, 256))), ("k_grad", t((11, 256))), ("cos", t((4, 128))), ("sin", t((4, 128)))],
                      dict(q_seq_len=[2, 1, 4, 4], mode="atb")),
        "rope": ([("q", t((11, 256))), ("k", t((11, 256))), ("cos", t((4, 128))), ("sin", t((4, 128)))],
                 dict(q_seq_len=[2, 1, 4, 4])),
        "cla_gate_backward": ([("grad_merged", t((5, 3, 8))), ("global_attn", t((5, 3, 8))),
                               ("local_attn", t((5, 3, 8))), ("global_gate_logits", t((5, 3))),
                               ("local_gate_logits", t((5, 3)))], dict(input_attn_layout="TND")),
        "cla_gate_merge": ([("global_attn", t((5, 3, 8))), ("local_attn", t((5, 3, 8))),
                            ("global_gate_logits", t((5, 3))), ("local_gate_logits", t((5, 3)))], {}),
        "sparse_flash_attention": ([("query", t((4, 2, 8))), ("key", t((6, 1, 8))), ("value", t((6, 1, 8))),
                                    ("sparse_indices", idx)],
                                   dict(actual_seq_lengths_query=[4], actual_seq_lengths_kv=[6], scale_value=0.5,
                                        layout="TND")),
        "sparse_flash_attention_grad": ([("query", t((4, 2, 8))), ("key", t((6, 1, 8))), ("value", t((6, 1, 8))),
                                         ("sparse_indices", idx), ("d_out", t((4, 2, 8))), ("out", t((4, 2, 8))),
                                         ("softmax_max", t((1, 4, 2))), ("softmax_sum", t((1, 4, 2)))],
                                        dict(scale_value=0.5, layout="TND")),
        "lightning_indexer": ([("query_index", t((4, 2, 8))), ("key_index", t((6, 1, 8))), ("weights", t((4, 2)))],
                              dict(actual_seq_lengths_query=[4], actual_seq_lengths_key=[6], sparse_count=3,
                                   layout="TND")),
        "lightning_indexer_grad": ([("query_index", t((4, 2, 8))), ("key_index", t((6, 1, 8))), ("weights", t((4, 2))),
                                    ("sparse_indices", idx), ("d_values", t((4, 1, 3)))],
                                   dict(actual_seq_lengths_query=[4], actual_seq_lengths_key=[6], layout="TND")),
        "sparse_lightning_indexer_grad_kl_loss": (
            [("query", t((4, 2, 8))), ("key", t((6, 1, 8))), ("query_index", t((4, 2, 8))),
             ("key_index", t((6, 1, 8))), ("weights", t((4, 2))), ("sparse_indices", idx),
             ("softmax_max", t((1, 4, 2))), ("softmax_sum", t((1, 4, 2)))], dict(scale_value=0.5, layout="TND")),
        "dense_lightning_indexer_softmax_lse": (
            [("query_index", t((4, 2, 8))), ("key_index", t((6, 1, 8))), ("weights", t((4, 2)))],
            dict(actual_seq_lengths_query=[4], actual_seq_lengths_key=[6], layout="TND")),
        "dense_lightning_indexer_grad_kl_loss": (
            [("query", t((4, 2, 8))), ("key", t((6, 1, 8))), ("query_index", t((4, 2, 8))),
             ("key_index", t((6, 1, 8))), ("weights", t((4, 2))), ("softmax_max", t((1, 4, 2))),
             ("softmax_sum", t((1, 4, 2))), ("softmax_max_index", t((1, 4))), ("softmax_sum_index", t((1, 4)))],
            dict(scale_value=0.5, layout="TND")),
        "sparse_lightning_indexer_kl_loss_grad": (
            [("query_index", t((4, 2, 8))), ("key_index", t((6, 1, 8))), ("weights", t((4, 2))),
             ("sparse_indices", idx), ("attn_softmax_l1_norm", t((4, 1, 3)))],
            dict(actual_seq_lengths_query=[4], actual_seq_lengths_key=[6], cmp_residual_k=[0], layout="TND")),
    }
    tables.update(_smla_cases(idx))
    tensors, kwargs = tables[op_name]
    tensors = [over.pop(n, x) for n, x in tensors]
    kwargs = {**kwargs, **over}
    return getattr(mgo.ops, op_name), tensors, kwargs


def _smla_cases(idx: Tensor) -> dict:
    """sparse_flash_mla(_grad): one TND sequence of 4 queries, 6 original tokens, 3 compressed entries (ratio 2)."""
    lens = dict(cmp_sparse_indices=idx, cu_seqlens_q=Tensor(np.asarray([0, 4], np.int32)),
                cu_seqlens_ori_kv=Tensor(np.asarray([0, 6], np.int32)),
                cu_seqlens_cmp_kv=Tensor(np.asarray([0, 3], np.int32)), cmp_ratio=2, layout="TND")
    sources = [("ori_kv", t((6, 1, 8))), ("cmp_kv", t((3, 1, 8)))]
    return {"sparse_flash_mla": ([("query", t((4, 2, 8))), *sources], lens),
            "sparse_flash_mla_grad": ([("query", t((4, 2, 8))), ("d_out", t((4, 2, 8))), ("out", t((4, 2, 8))),
                                       ("softmax_lse", t((1, 4, 2))), *sources], lens)}


_DTYPE_CASES = [("rope_grad", "q_grad", (11, 256)), ("cla_gate_backward", "global_attn", (5, 3, 8)),
                ("sparse_flash_attention", "key", (6, 1, 8)), ("lightning_indexer", "weights", (4, 2)),
                ("sparse_lightning_indexer_grad_kl_loss", "query_index", (4, 2, 8)),
                ("lightning_indexer_grad", "key_index", (6, 1, 8))]


_DTYPE_CASES = [(*c, d) for c in _DTYPE_CASES for d in (ms.int8, ms.uint8, ms.int16, ms.complex64)]


@pytest.mark.parametrize("exec_mode,op,arg,shape,dtype", _modes(_DTYPE_CASES, {0, 7, 10}))
def test_unsupported_dtypes_get_the_packages_message(exec_mode: str, op: str, arg: str, shape: tuple,
                                                     dtype: ms.dtype) -> None:
    name = {ms.int8: "int8", ms.uint8: "uint8", ms.int16: "int16", ms.complex64: "complex64"}[dtype]
    with pytest.raises(TypeError, match=rf"{op}: argument '{arg}' must (be float16, bfloat16 or float32|have the "
                                        rf"dtype of '\w+' \(float32\)), got {name}"):
        _run(exec_mode, *_case(op, **{arg: Tensor(np.ones(shape), dtype)}))


ATTRIBUTE_CASES = [
    ("sparse_flash_attention", dict(sparse_block_size=1.5), TypeError,
     r"sparse_flash_attention: attribute 'sparse_block_size' must be an int, got float 1.5"),
    ("sparse_flash_attention", dict(sparse_block_size=True), TypeError,
     r"attribute 'sparse_block_size' must be an int, got bool"),
    ("sparse_flash_attention", dict(sparse_block_size=2**64), ValueError,
     r"attribute 'sparse_block_size' must be an integer in \[1, 2147483647\], got 18446744073709551616"),
    ("sparse_flash_attention", dict(sparse_block_size=0), ValueError,
     r"attribute 'sparse_block_size' must be an integer in \[1, 2147483647\], got 0"),
    ("sparse_flash_attention", dict(scale_value="0.2"), TypeError,
     r"attribute 'scale_value' must be a float \(or int\), got str '0.2'"),
    ("sparse_flash_attention", dict(scale_value=float("nan")), ValueError,
     r"attribute 'scale_value' must be a finite float32 \(\|x\| <= 3.4028235e\+38\), got nan"),
    ("sparse_flash_attention", dict(layout=None), TypeError, r"attribute 'layout' must be a str, got NoneType None"),
    ("sparse_flash_attention", dict(sparse_mode="3"), TypeError, r"attribute 'sparse_mode' must be an int, got str"),
    ("sparse_flash_attention_grad", dict(deterministic=1), TypeError,
     r"sparse_flash_attention_grad: attribute 'deterministic' must be a bool \(True or False\), got int 1"),
    ("sparse_flash_attention_grad", dict(pre_tokens=2**40), ValueError,
     r"sparse_flash_attention_grad: attribute 'pre_tokens' must be one of 2147483647 \(unbounded\), got"),
    ("lightning_indexer", dict(sparse_count=4.7), TypeError, r"lightning_indexer: attribute 'sparse_count' must be an int"),
    ("lightning_indexer", dict(sparse_count=2**31), ValueError,
     r"attribute 'sparse_count' must be an integer in \[1, 1048576\], got"),
    ("lightning_indexer", dict(sparse_count=-5), ValueError,
     r"attribute 'sparse_count' must be an integer in \[1, 1048576\], got -5"),
    ("sparse_lightning_indexer_grad_kl_loss", dict(deterministic="no"), TypeError,
     r"sparse_lightning_indexer_grad_kl_loss: attribute 'deterministic' must be a bool \(True or False\), got str"),
    ("sparse_lightning_indexer_grad_kl_loss", dict(scale_value=1e39), ValueError,
     r"attribute 'scale_value' must be a finite float32"),
    ("rope_grad", dict(mode=None), TypeError, r"rope_grad: attribute 'mode' must be a str, got NoneType None"),
    ("cla_gate_backward", dict(input_attn_layout=None), TypeError,
     r"cla_gate_backward: attribute 'input_attn_layout' must be a str, got NoneType None"),
    # an int32 that would ask MindSpore for 16 GiB of outputs per query row (the size rule)
    ("lightning_indexer", dict(sparse_count=2**31 - 1), ValueError,
     r"lightning_indexer: attribute 'sparse_count' must be an integer in \[1, 1048576\], got 2147483647"),
    ("lightning_indexer_grad", dict(sparse_mode=2), ValueError,
     r"lightning_indexer_grad: attribute 'sparse_mode' must be one of 0 \(no mask\), 3 \(rightDownCausal\), "
     r"got 2"),
    # an unhashable value is checked like any other (attributes are not a cache key)
    ("sparse_flash_attention", dict(layout=["TND"]), TypeError,
     r"sparse_flash_attention: attribute 'layout' must be a str, got list \['TND'\]"),
]


@pytest.mark.parametrize("exec_mode,op,over,exc,match", _modes(ATTRIBUTE_CASES, {0, 2, 4, 11, 13, 15, 17, 19}))
def test_attributes_have_exact_types_and_stated_ranges(exec_mode: str, op: str, over: dict, exc: type,
                                                       match: str) -> None:
    if exec_mode == "graph" and any(isinstance(v, int) and abs(v) >= 2**63 for v in over.values()):
        # MindSpore's graph parser converts every Python int constant to int64 before any op code
        # runs; beyond that it fails itself (no op name is possible there).
        exc, match = RuntimeError, r"Unable to cast Python instance of type <class 'int'>"
    with pytest.raises(exc, match=match):
        _run(exec_mode, *_case(op, **over))


_RANK_CASES = [
    ("rope_grad", dict(q_grad=t((11,)), k_grad=t((11,))), r"rope_grad: argument 'q_grad' must be 2-D, got shape \[11\]"),
    ("rope_grad", dict(q_grad=t(()), k_grad=t(())), r"rope_grad: argument 'q_grad' must be 2-D, got shape \[\]"),
    ("sparse_flash_attention", dict(query=t(())), r"sparse_flash_attention: argument 'query' must be 3-D \(layout \"TND\"; pass layout=\"BSND\" for \[B, S, N, D\] tensors\), got shape \[\]"),
    ("sparse_flash_attention", dict(key=t(())), r"argument 'key' must be 3-D \(layout \"TND\"; pass layout=\"BSND\" for \[B, S, N, D\] tensors\), got shape \[\]"),
    ("sparse_flash_attention_grad", dict(query=t((4, 2, 8, 1))), r"argument 'query' must be 3-D \(layout \"TND\"; pass layout=\"BSND\" for \[B, S, N, D\] tensors\), got shape \[4, 2, 8, 1\]"),
    ("lightning_indexer", dict(query_index=t(())), r"lightning_indexer: argument 'query_index' must be 3-D \(layout \"TND\"; pass layout=\"BSND\" for \[B, S, N, D\] tensors\), got shape \[\]"),
    ("sparse_lightning_indexer_grad_kl_loss", dict(key=t(())), r"argument 'key' must be 3-D \(layout \"TND\"; pass layout=\"BSND\" for \[B, S, N, D\] tensors\), got shape \[\]"),
    ("cla_gate_merge", dict(global_gate_logits=t(())), r"argument 'global_gate_logits' must be 2-D, got shape \[\]"),
    ("lightning_indexer_grad", dict(sparse_indices=Tensor(np.zeros((4, 3), np.int32))),
     r"lightning_indexer_grad: argument 'sparse_indices' must be 3-D \(layout \"TND\"; pass layout=\"BSND\" for \[B, S, N, D\] tensors\), got shape \[4, 3\]"),
]


@pytest.mark.parametrize("exec_mode,op,over,match", _modes(_RANK_CASES, {1, 2}))
def test_wrong_rank_is_reported_as_a_rank_error(exec_mode: str, op: str, over: dict, match: str) -> None:
    """Checked before any lengths value (the lengths rule used to speak first), never an IndexError."""
    with pytest.raises(ValueError, match=match):
        _run(exec_mode, *_case(op, **over))


@pytest.mark.parametrize("op", list(OP_SPECS))
def test_the_error_cases_start_from_a_valid_call(op: str) -> None:
    """The cases above break one rule each: the unbroken call runs."""
    out = _run("pynative", *_case(op))
    for x in out if isinstance(out, tuple) else (out,):
        if x is not None:
            x.asnumpy()


# --- every tensor argument and attribute of every op: the error names the op and that argument ---

_OPS = list(OP_SPECS)
_OPTIONAL_TENSORS = {  # optional tensor arguments, given so that they can be broken too
    "sparse_flash_attention": dict(query_rope=t((4, 2, 4)), key_rope=t((6, 1, 4))),
    "sparse_flash_attention_grad": dict(query_rope=t((4, 2, 4)), key_rope=t((6, 1, 4))),
    "sparse_lightning_indexer_grad_kl_loss": dict(query_rope=t((4, 2, 4)), key_rope=t((6, 1, 4))),
    "dense_lightning_indexer_grad_kl_loss": dict(query_rope=t((4, 2, 4)), key_rope=t((6, 1, 4))),
}
_OPTIONAL_TENSORS.update({op: dict(ori_sparse_indices=Tensor(np.full((4, 1, 2), -1, np.int32)),
                                   cmp_residual_kv=Tensor(np.asarray([0], np.int32)), sinks=t((2,)))
                          for op in ("sparse_flash_mla", "sparse_flash_mla_grad")})
# The lengths inputs of each op: int32 or int64 in the table (indices are int32 only).
_LENGTHS = {op: [n for i, n in enumerate(spec.inputs) if any(row[i] == "int64" for row in spec.dtypes)]
            for op, spec in OP_SPECS.items()}


def _tensor_args(op: str) -> dict:
    fn, tensors, kwargs = _case(op, **_OPTIONAL_TENSORS.get(op, {}))
    names = [n for n in __import__("inspect").signature(fn).parameters][:len(tensors)]
    args = dict(zip(names, tensors))
    args.update({k: v for k, v in kwargs.items() if isinstance(v, Tensor)})
    for name in _LENGTHS.get(op, []):   # lengths as int tensors (their rank and dtype rules)
        value = kwargs.get(name) or ([4] if name.endswith("query") else [6])
        kwargs.pop(name, None)
        args[name] = Tensor(np.asarray(value, np.int32))
    return args


def _broken(op: str, arg: str, how: str) -> list:
    args = _tensor_args(op)
    x = args[arg]
    if how == "rank+1":
        args[arg] = Tensor(np.zeros((*x.shape, 2), np.float32), x.dtype) if x.dtype != ms.int32 else \
            Tensor(np.zeros((*x.shape, 2), np.int32))
    elif how == "rank0":
        args[arg] = Tensor(np.float32(1), x.dtype) if x.dtype != ms.int32 else Tensor(np.int32(1))
    else:
        args[arg] = Tensor(np.ones(x.shape), ms.float64 if x.dtype == ms.int32 else ms.int16)
    return [(op, arg, how, args)]


_EVERY_ARG = [c for op in _OPS for arg in _tensor_args(op) for how in ("rank+1", "rank0", "dtype")
              for c in _broken(op, arg, how)]


@pytest.mark.parametrize("op,arg,how,args", _EVERY_ARG, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in _EVERY_ARG])
def test_every_tensor_argument_is_checked_by_name(op: str, arg: str, how: str, args: dict) -> None:
    fn, tensors, kwargs = _case(op)
    kwargs = {k: v for k, v in kwargs.items() if not isinstance(v, Tensor)}
    kwargs.update(args)
    exc = TypeError if how == "dtype" else ValueError
    with pytest.raises(exc, match=rf"^{op}: .*'{arg}'.*(got|shape)"):
        fn(**kwargs)


_ATTRS = {op: list(OP_SPECS[op].attrs) for op in _OPS}
_BAD_VALUES = {"int": [None, "1", 1.0, True, 2**31, -(2**31) - 1], "float": [None, "0.5", True, float("inf")],
               "bool": [None, 1, "True"], "str": [None, 1, b"TND", "nonsense"]}
_EVERY_ATTR = [(op, a.name, v) for op in _OPS for a in _ATTRS[op] for v in _BAD_VALUES[a.type]]


@pytest.mark.parametrize("op,attr,value", _EVERY_ATTR, ids=[f"{c[0]}-{c[1]}-{c[2]!r}" for c in _EVERY_ATTR])
def test_every_attribute_is_checked_by_name(op: str, attr: str, value: object) -> None:
    fn, tensors, kwargs = _case(op, **{attr: value})
    with pytest.raises((TypeError, ValueError), match=rf"^{op}: attribute '{attr}' .*got .*{re.escape(str(value))}"):
        fn(*tensors, **kwargs)


# ------------------------------------------------------------------ Cells: int arguments beyond int64

def _cell_kwargs() -> dict[str, dict]:
    """A valid constructor call of every public Cell that takes int arguments."""
    from _cell_matrix import DSA_CFG
    attn = mgo.nn.DSAttention(**DSA_CFG, max_seq_len=16)
    return {"SparseFlashAttention": {"scale_value": 0.5}, "LightningIndexer": {"sparse_count": 4},
            "IndexerKLLoss": {"scale_value": 0.5}, "DenseIndexerKLLoss": {"scale_value": 0.5}, "DSAttention": {**DSA_CFG, "max_seq_len": 16},
            "ContextParallelDSAttention": {"attn": attn, "cp_size": 1}}


def _int_arguments(cell: type) -> list[str]:
    return [n for n, p in inspect.signature(cell.__init__).parameters.items() if p.annotation == "int"]


@pytest.mark.parametrize("value", [2**64, -(2**64), 2**63])
def test_cell_int_arguments_outside_int64_are_value_errors(exec_mode: str, value: int) -> None:
    """Every int argument of every public Cell, checked in its constructor (Python, before any graph:
    a GRAPH compile cannot hold such an int at all, see the attribute cases above): a ValueError
    naming the Cell or its op and the argument, in both modes."""
    from _cell_matrix import public_cells
    kwargs = _cell_kwargs()
    cells = {c.__name__: c for c in public_cells()}
    assert {n for n, c in cells.items() if _int_arguments(c)} == set(kwargs)
    for name, base in kwargs.items():
        for arg in _int_arguments(cells[name]):
            with pytest.raises(ValueError, match=rf"^(\w+): (argument|attribute) '{arg}' .*got {value}"):
                cells[name](**{**base, arg: value})
