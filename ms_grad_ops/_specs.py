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
    """The combinations the Ascend OpDef declares (float16/bfloat16 only; lengths int32)."""


FLOATS = ("float16", "bfloat16", "float32")
INTS = ("int32", "int64")

# rope / rope_grad: q and k share a dtype; cos/sin may use another float dtype; lengths int32/int64.
_ROPE_DTYPES = tuple((x, x, c, c, i, x, x) for x in FLOATS for c in FLOATS for i in INTS)
ASCEND_FLOATS = ("float16", "bfloat16")
_ROPE_ASCEND = tuple((x, x, x, x, "int32", x, x) for x in ASCEND_FLOATS)

_SPECS = (
    OpSpec("rope", "Rope", ("q", "k", "cos", "sin", "q_seq_len"), ("q_embed", "k_embed"),
           dtypes=_ROPE_DTYPES, ascend_dtypes=_ROPE_ASCEND),
    OpSpec("rope_grad", "RopeGrad", ("q_grad", "k_grad", "cos", "sin", "q_seq_len"),
           ("q_grad_out", "k_grad_out"), (AttrSpec("mode", "str", "atb"),), _ROPE_DTYPES, _ROPE_ASCEND),
    OpSpec("cla_gate_merge", "ClaGateMerge",
           ("global_attn", "local_attn", "global_gate_logits", "local_gate_logits"), ("merged",),
           dtypes=tuple((x,) * 5 for x in FLOATS), ascend_dtypes=tuple((x,) * 5 for x in ASCEND_FLOATS)),
    OpSpec("cla_gate_backward", "ClaGateBackward",
           ("grad_merged", "global_attn", "local_attn", "global_gate_logits", "local_gate_logits"),
           ("grad_global_attn", "grad_local_attn", "grad_global_gate_logits", "grad_local_gate_logits"),
           (AttrSpec("input_attn_layout", "str", "TND"),), tuple((x,) * 9 for x in FLOATS),
           tuple((x,) * 9 for x in ASCEND_FLOATS)),
)

OP_SPECS: dict[str, OpSpec] = {spec.name: spec for spec in _SPECS}
