"""The one table of op names, inputs, outputs and attributes, and of the forward/grad pairing.

Every layer derives from it: the CPU reg_info and the Ascend reg_info in ``_custom.py``, the glue
that ``scripts/gen_glue.py`` generates (C++ slot indices, the bprops of ``_bprop_table.py``), and
the Ascend OpDef sources are checked against it by the tests, so the names can never drift.
Standard library only: the generators load this file by path, without MindSpore.
"""
from __future__ import annotations

from dataclasses import dataclass, field


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


# ---------------------------------------------------------------- the forward/grad pairing
# The model is PyTorch's derivatives.yaml: for each differentiable forward op, the grad op that is
# its backward, where each grad input comes from and which grad output is the gradient of which
# forward input. scripts/glue/bprops.py generates the bprops (ms_grad_ops/_bprop_table.py) from it.

@dataclass(frozen=True)
class GradSpec:
    """The backward of forward op ``forward``: one call of its fused grad op ``grad``."""

    forward: str
    grad: str
    inputs: tuple[str, ...]
    """One source per input of ``grad``, in its order: a forward input by name, ``result.<output>``
    (a forward output) or ``grad.<output>`` (the incoming gradient of a forward output)."""
    gradients: dict[str, str]
    """{forward input: the grad output that is its gradient}. Every other forward input (indices,
    lengths, tables) gets zeros; every grad output is the gradient of one forward input."""
    copied_attrs: tuple[str, ...] = ()
    """Grad attributes that take the value of the forward attribute of the same name."""
    fixed_attrs: dict[str, object] = field(default_factory=dict)
    """Grad attributes with a fixed value. The grad's other attributes keep their defaults."""
    note: str = ""
    """Why the wiring is as it is (the generated bprop's docstring)."""


_SFA_FORWARD_ATTRS = tuple(a.name for a in _SFA_ATTRS)

DERIVATIVES: dict[str, GradSpec] = {d.forward: d for d in (
    GradSpec("rope", "rope_grad", ("grad.q_embed", "grad.k_embed", "cos", "sin", "q_seq_len"),
             {"q": "q_grad_out", "k": "k_grad_out"}, fixed_attrs={"mode": "vjp"},
             note="The exact VJP of rope (mode vjp); cos, sin and the lengths are tables."),
    GradSpec("cla_gate_merge", "cla_gate_backward",
             ("grad.merged", "global_attn", "local_attn", "global_gate_logits", "local_gate_logits"),
             {"global_attn": "grad_global_attn", "local_attn": "grad_local_attn",
              "global_gate_logits": "grad_global_gate_logits", "local_gate_logits": "grad_local_gate_logits"},
             fixed_attrs={"input_attn_layout": "TND"}),
    GradSpec("sparse_flash_attention", "sparse_flash_attention_grad",
             ("query", "key", "value", "sparse_indices", "grad.out", "result.out", "result.softmax_max",
              "result.softmax_sum", "actual_seq_lengths_query", "actual_seq_lengths_kv", "query_rope", "key_rope"),
             {"query": "d_query", "key": "d_key", "value": "d_value", "query_rope": "d_query_rope",
              "key_rope": "d_key_rope"}, copied_attrs=_SFA_FORWARD_ATTRS,
             note="The statistics carry no gradient. An absent value/rope input gets its absent (zero-size) "
                  "gradient; with value absent d_key is the fused dK + dV."),
    GradSpec("lightning_indexer", "lightning_indexer_grad",
             ("query_index", "key_index", "weights", "result.sparse_indices", "grad.sparse_values",
              "actual_seq_lengths_query", "actual_seq_lengths_key"),
             {"query_index": "d_query_index", "key_index": "d_key_index", "weights": "d_weights"},
             copied_attrs=("layout", "sparse_mode"),
             note="Only the values carry a gradient; the selected indices say which keys it flows to. -1 slots "
                  "are skipped by the kernel, so their -inf values never matter."),
)}

BACKWARD_OP = "it is a backward op itself; differentiate the forward op or its nn Cell instead"
"""Why a grad op of ``DERIVATIVES`` has no gradient of its own."""

NO_GRADIENT: dict[str, str] = {
    "sparse_lightning_indexer_grad_kl_loss": "it returns the loss together with its gradients; use "
                                             "nn.IndexerKLLoss, whose backward scales them by the incoming gradient",
}
"""Why each op that is neither a forward of ``DERIVATIVES`` nor a grad op has no gradient."""


def no_gradient_reason(name: str) -> str | None:
    """Why op ``name`` has no gradient, or None for a differentiable forward op."""
    if name in DERIVATIVES:
        return None
    if name in NO_GRADIENT:
        return NO_GRADIENT[name]
    if any(d.grad == name for d in DERIVATIVES.values()):
        return BACKWARD_OP
    raise KeyError(f"{name}: neither in DERIVATIVES nor a grad op nor in NO_GRADIENT")


def _check_derivatives() -> None:
    """The pairing names only what the table has (a typo fails at import, here and in the generators)."""
    for d in DERIVATIVES.values():
        fwd, grad = OP_SPECS[d.forward], OP_SPECS[d.grad]
        where = f"DERIVATIVES[{d.forward!r}]"
        if len(d.inputs) != len(grad.inputs):
            raise ValueError(f"{where}: {len(d.inputs)} sources for the {len(grad.inputs)} inputs of {d.grad}")
        for source in d.inputs:
            kind, _, name = source.rpartition(".")
            if (kind and (kind not in ("result", "grad") or name not in fwd.outputs)) or \
                    (not kind and name not in fwd.inputs):
                raise ValueError(f"{where}: {source!r} is no forward input, result.<output> or grad.<output>")
        if not set(d.gradients) <= set(fwd.inputs) or sorted(d.gradients.values()) != sorted(grad.outputs):
            raise ValueError(f"{where}: gradients must map forward inputs to every output of {d.grad} once")
        grad_attrs = {a.name: a.type for a in grad.attrs}
        fwd_attrs = {a.name: a.type for a in fwd.attrs}
        for name in d.copied_attrs:
            if grad_attrs.get(name) is None or grad_attrs[name] != fwd_attrs.get(name):
                raise ValueError(f"{where}: attribute {name!r} is not in both ops with one type")
        if not set(d.fixed_attrs) <= set(grad_attrs) or set(d.fixed_attrs) & set(d.copied_attrs):
            raise ValueError(f"{where}: fixed attributes must be attributes of {d.grad}, not also copied")
    for name in OP_SPECS:
        no_gradient_reason(name)


_check_derivatives()
