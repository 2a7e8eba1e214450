"""MindSpore 2.10's operators without a CPU kernel, supplied on CPU by ``install()``.

MindSpore Transformers' training graphs (DeepSeek-V3.2: MLA + DSA, MoE, MTP) call primitives that
MindSpore 2.10 runs only on Ascend ("Unsupported op [RmsNorm] on CPU"), or, for ``BatchMatMul``,
runs on CPU without the batch broadcasting Ascend does. ``install()`` (called by
``ms_grad_ops.builtins.install()``) binds, on a CPU device target only, a stand-in with the same
call signature and semantics onto every module attribute holding MindSpore's class or function:

MindSpore's class (and functional form) -> stand-in module: how

- ``RmsNorm`` (``ops.rms_norm``) -> ``norm``: mean of squares, rsqrt, products
- ``Outer`` (``mint.outer``), ``BatchMatMul`` (batch broadcasting), ``GroupedMatmul``
  (``auto_generate.grouped_matmul``) -> ``matmul``: ``[n, 1] * [1, m]``; ``broadcast_to`` + MindSpore's
  ``BatchMatMul``; every expert's product masked to its rows
- ``SliceExt``, ``IndexSelect`` (``mint.index_select``), ``Embedding``
  (``mint.nn.functional.embedding``, whose backward is ``EmbeddingDenseBackward``) -> ``indexing``:
  ``Slice`` (a ``Gather`` for strided slices); ``Gather`` (gradient ``UnsortedSegmentSum``)
- ``TopkExt`` (``mint.topk``), ``SortExt`` (``mint.sort``), ``CumsumExt`` (``mint.cumsum``) ->
  ``sorting``: ``Sort`` (stable: ties in index order) / ``CumSum`` on the last axis, transposes
- ``Swiglu`` (``ops.swiglu``), ``FmodScalar`` -> ``elementwise``: halves, sigmoid, products; ``Mod``
- ``MoeTokenPermute``, ``MoeTokenUnpermute`` (+ functions) -> ``moe``: ``Sort``, ``Gather``, sums
- ``AlltoAll``, ``AlltoAllV`` over a group of one member, ``MoveTo`` (``ops.move_to``) -> ``comm``:
  the identity (larger groups keep MindSpore's primitive; CPU tensors are in host memory)
- ``mint.arange``, ``mint.full``, ``mint.ones_like``, ``mint.zeros_like`` (no PyNative kernels;
  GRAPH mode folds most calls, not ``full`` in bfloat16) -> ``creation``: a constant, ``Fill``,
  ``Ones``, ``Zeros``
- ``mint.stack`` (``StackExt``), ``mint.roll`` -> ``joining``: ``Stack``; ``Slice`` + ``Concat``
- ``mint.split``, ``array_func.split_ext`` (PyNative: a silently wrong gradient, not a missing kernel) ->
  ``joining``: ``mint.narrow`` pieces; MindSpore's own in GRAPH mode

Each stand-in is a ``mindspore.jit_class`` built from operators that have CPU kernels, so GRAPH
mode compiles it wherever a Primitive instance would be (a Cell attribute, constructed inline in
``construct``, inside ``ops.Morph``) and MindSpore's autodiff differentiates it; the calls that
configure a Primitive (``shard``, ``recompute``, ``add_prim_attr``, ...) are accepted and ignored.
16-bit floats are computed in float32 and rounded once, as on Ascend; integer and bool data move
unchanged. A composite was chosen for every op: each is exact (data movement, or the float32
arithmetic Ascend does), and none is far too slow at the sizes one debugs on CPU (``GroupedMatmul``
costs E times the grouped product; it says so). Uninstall with ``uninstall()``.
"""
from __future__ import annotations

import importlib

import mindspore as ms

from . import _rebind, comm, creation, elementwise, indexing, joining, matmul, moe, norm, sorting

__all__ = ["install", "installed", "uninstall", "SUPPLIED"]

_PRIM = "mindspore.ops.auto_generate.gen_ops_prim"
_DEF = "mindspore.ops.auto_generate.gen_ops_def"
_ARRAY = "mindspore.ops.function.array_func"
# (module, attribute) of MindSpore's object -> the stand-in bound in its place.
SUPPLIED: dict[tuple[str, str], object] = {
    (_PRIM, "RmsNorm"): norm.RmsNorm,
    (_DEF, "rms_norm"): norm.rms_norm,
    (_PRIM, "Outer"): matmul.Outer,
    (_DEF, "outer_ext"): matmul.outer_ext,
    (_PRIM, "BatchMatMul"): matmul.BatchMatMul,
    (_PRIM, "GroupedMatmul"): matmul.GroupedMatmul,
    (_DEF, "grouped_matmul"): matmul.grouped_matmul,
    (_PRIM, "SliceExt"): indexing.SliceExt,
    (_PRIM, "IndexSelect"): indexing.IndexSelect,
    (_DEF, "index_select_ext"): indexing.index_select_ext,
    (_PRIM, "Embedding"): indexing.Embedding,
    ("mindspore.ops.function.nn_func", "embedding"): indexing.embedding,
    (_PRIM, "TopkExt"): sorting.TopkExt,
    (_DEF, "topk_ext"): sorting.topk_ext,
    (_PRIM, "SortExt"): sorting.SortExt,
    (_DEF, "sort_ext"): sorting.sort_ext,
    ("mindspore.ops.function.array_func", "sort_ext"): sorting.sort_ext_keywords,
    (_PRIM, "CumsumExt"): sorting.CumsumExt,
    (_DEF, "cumsum_ext"): sorting.cumsum_ext,
    (_PRIM, "Swiglu"): elementwise.Swiglu,
    (_DEF, "swiglu"): elementwise.swiglu,
    (_PRIM, "FmodScalar"): elementwise.FmodScalar,
    (_PRIM, "MoeTokenPermute"): moe.MoeTokenPermute,
    (_DEF, "moe_token_permute"): moe.moe_token_permute,
    (_PRIM, "MoeTokenUnpermute"): moe.MoeTokenUnpermute,
    (_DEF, "moe_token_unpermute"): moe.moe_token_unpermute,
    ("mindspore.ops.operations.comm_ops", "AlltoAll"): comm.AlltoAll,
    ("mindspore.ops.operations.comm_ops", "AlltoAllV"): comm.AlltoAllV,
    ("mindspore.ops.operations.other_ops", "MoveTo"): comm.MoveTo,
    ("mindspore.ops.function.other_func", "move_to"): comm.move_to,
    # MindSpore Transformers master's pynative DeepSeek-V4 attention (docs/cpu.md: split's gradient)
    (_ARRAY, "arange_ext"): creation.arange_ext,
    (_ARRAY, "full_ext"): creation.full_ext,
    (_ARRAY, "ones_like_ext"): creation.ones_like_ext,
    (_ARRAY, "zeros_like_ext"): creation.zeros_like_ext,
    (_DEF, "stack_ext"): joining.stack_ext,
    (_DEF, "roll"): joining.roll,
    (_ARRAY, "split_view"): joining.split_view,
    (_ARRAY, "split_ext"): joining.split_ext,
}


def _mindspore_objects() -> dict[int, tuple[object, object]]:
    """id(MindSpore's object) -> (it, its stand-in); MindSpore's even where install() has rebound
    its home attribute."""
    found = {}
    for (module_name, name), ours in SUPPLIED.items():
        original = _rebind.saved_original(module_name, name) or getattr(importlib.import_module(module_name), name)
        found[id(original)] = (original, ours)
    return found


def installed() -> bool:
    """Whether ``install()`` has bound the stand-ins (and ``uninstall()`` not yet restored them)."""
    return _rebind.rebound()


def install() -> bool:
    """On a CPU device target, binds every stand-in of ``SUPPLIED`` wherever MindSpore's object is
    bound (MindSpore's namespaces, and modules imported before, e.g. MindSpore Transformers');
    code imported later takes the stand-ins from MindSpore's namespaces. Call it before building
    and compiling the network. Idempotent; returns False and touches nothing on another device
    target (Ascend keeps its kernels)."""
    if ms.get_context("device_target") != "CPU":
        return False
    _rebind.rebind(_mindspore_objects())
    return True


def uninstall() -> None:
    """Restores MindSpore's objects wherever a stand-in is still bound. Cells built while installed
    keep the stand-in instances they hold. Idempotent."""
    _rebind.restore({id(ours) for ours in SUPPLIED.values()})
