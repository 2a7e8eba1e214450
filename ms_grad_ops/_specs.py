"""The one table of op names, inputs, outputs and attributes.

Every layer derives from it: the CPU reg_info and the Ascend reg_info in ``_custom.py``, and the
Ascend OpDef sources are checked against it by the tests, so the names can never drift.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AttrSpec:
    """A primitive attribute. ``type`` is a CustomRegOp attr type: int, float, str, bool, listInt."""

    name: str
    type: str
    default: object


@dataclass(frozen=True)
class OpSpec:
    """One op: snake ``name`` (Python, files), CamelCase ``op_type`` (C symbols, OpDef)."""

    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple[AttrSpec, ...] = ()
    dtypes: tuple[tuple[str, ...], ...] = ()
    """Accepted dtype combinations on CPU, one per row, over inputs then outputs (reg_info dtype_format)."""
    ascend_dtypes: tuple[tuple[str, ...], ...] = ()
    """The combinations the Ascend OpDef declares (16-bit floats, float32 statistics/weights, int32
    indices; lengths int32, or int32/int64 where the kernel reads both)."""
    optional: frozenset[str] = frozenset()
    """Inputs that may be absent: Python passes the zero-size placeholder of ``ms_grad_ops/_optional.py``,
    the Ascend OpDef declares them OPTIONAL (CANN may omit them)."""
    ascend_socs: tuple[str, ...] = ("ascend910b", "ascend910_93")
    """The SoCs the Ascend OpDef registers (AddConfig): Atlas A2 and A3, the seed ops' products."""


FLOATS = ("float16", "bfloat16", "float32")
INTS = ("int32", "int64")

# rope / rope_grad: q and k share a dtype; cos/sin may use another float dtype; lengths int32/int64.
_ROPE_DTYPES = tuple((x, x, c, c, i, x, x) for x in FLOATS for c in FLOATS for i in INTS)
ASCEND_FLOATS = ("float16", "bfloat16")
_ROPE_ASCEND = tuple((x, x, x, x, "int32", x, x) for x in ASCEND_FLOATS)

# Indexer ops: query/key/query_index/key_index (and ropes) share a float dtype X; weights are X or
# float32; sparse indices int32; statistics float32; each lengths input int32 or int64.
_INDEXER_XW = tuple((x, w) for x in FLOATS for w in dict.fromkeys((x, "float32")))
_LIGHTNING_INDEXER_DTYPES = tuple((x, x, w, lq, lk, "int32", "float32")
                                  for x, w in _INDEXER_XW for lq in INTS for lk in INTS)
_INDEXER_GRAD_DTYPES = tuple((x, x, x, x, w, "int32", "float32", "float32", x, x, lq, lk, x, x, w, "float32")
                             for x, w in _INDEXER_XW for lq in INTS for lk in INTS)
# What their Ascend OpDefs are to declare (issue 11): 16-bit X, weights X or float32, int32 lengths.
_INDEXER_XW_ASCEND = tuple((x, w) for x in ASCEND_FLOATS for w in (x, "float32"))

# The cla_gate kernels use only the vector API common to A2/A3/950 and size tiles from the UB: the
# seed op's own target, Ascend 950, too.
_CLA_SOCS = ("ascend910b", "ascend910_93", "ascend950")
_SPECS = (
    OpSpec("rope", "Rope", ("q", "k", "cos", "sin", "q_seq_len"), ("q_embed", "k_embed"),
           dtypes=_ROPE_DTYPES, ascend_dtypes=_ROPE_ASCEND),
    OpSpec("rope_grad", "RopeGrad", ("q_grad", "k_grad", "cos", "sin", "q_seq_len"),
           ("q_grad_out", "k_grad_out"), (AttrSpec("mode", "str", "atb"),), _ROPE_DTYPES, _ROPE_ASCEND),
    OpSpec("cla_gate_merge", "ClaGateMerge",
           ("global_attn", "local_attn", "global_gate_logits", "local_gate_logits"), ("merged",),
           dtypes=tuple((x,) * 5 for x in FLOATS), ascend_dtypes=tuple((x,) * 5 for x in ASCEND_FLOATS),
           ascend_socs=_CLA_SOCS),
    OpSpec("cla_gate_backward", "ClaGateBackward",
           ("grad_merged", "global_attn", "local_attn", "global_gate_logits", "local_gate_logits"),
           ("grad_global_attn", "grad_local_attn", "grad_global_gate_logits", "grad_local_gate_logits"),
           (AttrSpec("input_attn_layout", "str", "TND"),), tuple((x,) * 9 for x in FLOATS),
           tuple((x,) * 9 for x in ASCEND_FLOATS), ascend_socs=_CLA_SOCS),
    OpSpec("lightning_indexer", "LightningIndexer",
           ("query_index", "key_index", "weights", "actual_seq_lengths_query", "actual_seq_lengths_key"),
           ("sparse_indices", "sparse_values"),
           (AttrSpec("sparse_count", "int", 2048), AttrSpec("layout", "str", "BSND"),
            AttrSpec("sparse_mode", "int", 3)), _LIGHTNING_INDEXER_DTYPES,
           tuple((x, x, w, "int32", "int32", "int32", "float32") for x, w in _INDEXER_XW_ASCEND),
           frozenset({"actual_seq_lengths_query", "actual_seq_lengths_key"})),
    OpSpec("lightning_indexer_grad", "LightningIndexerGrad",
           ("query_index", "key_index", "weights", "sparse_indices", "d_values", "actual_seq_lengths_query",
            "actual_seq_lengths_key"),
           ("d_query_index", "d_key_index", "d_weights"),
           (AttrSpec("layout", "str", "BSND"), AttrSpec("sparse_mode", "int", 3)),
           dtypes=tuple((x, x, w, "int32", "float32", lq, lk, x, x, w) for x, w in _INDEXER_XW for lq in INTS
                        for lk in INTS),
           ascend_dtypes=tuple((x, x, w, "int32", "float32", "int32", "int32", x, x, w) for x, w in _INDEXER_XW_ASCEND),
           optional=frozenset({"actual_seq_lengths_query", "actual_seq_lengths_key"})),
    OpSpec("sparse_lightning_indexer_grad_kl_loss", "SparseLightningIndexerGradKLLoss",
           ("query", "key", "query_index", "key_index", "weights", "sparse_indices", "softmax_max", "softmax_sum",
            "query_rope", "key_rope", "actual_seq_lengths_query", "actual_seq_lengths_key"),
           ("d_query_index", "d_key_index", "d_weights", "loss"),
           (AttrSpec("scale_value", "float", 1.0), AttrSpec("layout", "str", "BSND"), AttrSpec("sparse_mode", "int", 3),
            AttrSpec("deterministic", "bool", False)), _INDEXER_GRAD_DTYPES,
           tuple((x, x, x, x, w, "int32", "float32", "float32", x, x, "int32", "int32", x, x, w, "float32")
                 for x, w in _INDEXER_XW_ASCEND),
           frozenset({"query_rope", "key_rope", "actual_seq_lengths_query", "actual_seq_lengths_key"})),
)

# sparse_flash_attention(_grad): one float dtype for all float tensors, int32 indices, float32
# statistics, int32/int64 lengths. value, the rope pair and the lengths are optional: an absent one
# is the zero-size placeholder of ms_grad_ops/_optional.py (in the slot's dtype), and so is its gradient.
_SFA_ATTRS = (AttrSpec("scale_value", "float", 1.0), AttrSpec("sparse_block_size", "int", 1),
              AttrSpec("layout", "str", "BSND"), AttrSpec("sparse_mode", "int", 3))
_SFA_GRAD_ATTRS = (*_SFA_ATTRS, AttrSpec("pre_tokens", "int", 2147483647),
                   AttrSpec("next_tokens", "int", 2147483647), AttrSpec("deterministic", "bool", False))
_F32 = "float32"
_SFA_OPTIONAL = frozenset({"value", "query_rope", "key_rope", "actual_seq_lengths_query", "actual_seq_lengths_kv"})
_SFA_SPECS = (
    OpSpec("sparse_flash_attention", "SparseFlashAttention",
           ("query", "key", "value", "sparse_indices", "query_rope", "key_rope", "actual_seq_lengths_query",
            "actual_seq_lengths_kv"), ("out", "softmax_max", "softmax_sum"), _SFA_ATTRS,
           tuple((x, x, x, "int32", x, x, i, j, x, _F32, _F32) for x in FLOATS for i in INTS for j in INTS),
           tuple((x, x, x, "int32", x, x, i, i, x, _F32, _F32) for i in INTS for x in ASCEND_FLOATS), _SFA_OPTIONAL),
    OpSpec("sparse_flash_attention_grad", "SparseFlashAttentionGrad",
           ("query", "key", "value", "sparse_indices", "d_out", "out", "softmax_max", "softmax_sum",
            "actual_seq_lengths_query", "actual_seq_lengths_kv", "query_rope", "key_rope"),
           ("d_query", "d_key", "d_value", "d_query_rope", "d_key_rope"), _SFA_GRAD_ATTRS,
           tuple((x, x, x, "int32", x, x, _F32, _F32, i, j, x, x) + (x,) * 5
                 for x in FLOATS for i in INTS for j in INTS),
           tuple((x, x, x, "int32", x, x, _F32, _F32, i, i, x, x) + (x,) * 5 for i in INTS for x in ASCEND_FLOATS),
           _SFA_OPTIONAL),
)

OP_SPECS: dict[str, OpSpec] = {spec.name: spec for spec in (*_SPECS, *_SFA_SPECS)}
