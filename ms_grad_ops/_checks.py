"""Eager argument checks shared by the functional ops (``ops/``) and the Cells (``nn/``).

Shape/dtype/attribute rules are not written here: they live in ``infer_shape/`` and are called
through the ``_validate`` pybind11 module, so Python, GRAPH-mode infer and the kernels agree.
"""
from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Sequence

import mindspore as ms
import numpy as np
from mindspore import Tensor
from mindspore import ops as msops
from mindspore.ops import constexpr

from . import _validate
from ._custom import device_target, reads_int64
from ._dtypes import dtype_name
from ._specs import BACKENDS, INT32_MAX, INT32_MIN, OP_SPECS, AttrSpec

# The ops whose MindSpore built-in takes ``scale_value`` positionally (after sparse_indices), and the
# binding with that signature: a number in a tensor slot of the functional op there is most likely
# that positional scale_value.
_MINDSPORE_SIGNATURE = {"sparse_flash_attention": "ms_grad_ops.builtins.sparse_flash_attention"}


def _signature_hint(op: str, value: object) -> str:
    """For a number passed where a tensor belongs to an op with a ``scale_value`` attribute: the
    hint that ``scale_value`` is keyword-only here (and where MindSpore's signature is)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or op not in OP_SPECS:
        return ""
    if "scale_value" not in [a.name for a in OP_SPECS[op].attrs]:
        return ""
    hint = " (a number here looks like a positional scale_value: scale_value is keyword-only here, scale_value=..."
    if op in _MINDSPORE_SIGNATURE:
        hint += f"; the MindSpore-signature version is {_MINDSPORE_SIGNATURE[op]}"
    return hint + ")"


def check_tensor(op: str, arg: str, value: object) -> Tensor:
    """``value`` if it is a Tensor, else a ``TypeError`` naming the op and the argument (with a hint
    when the value looks like a positional ``scale_value`` of MindSpore's signature)."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}: argument '{arg}' must be a mindspore Tensor, got {type(value).__name__} "
                        f"{value!r:.60}{_signature_hint(op, value)}")
    return value


@constexpr
def _run_rules(op: str, shapes: tuple, dtypes: tuple, attr_items: tuple) -> bool:
    # constexpr: in GRAPH mode this runs in Python at compile time on the (possibly dynamic,
    # None/-1) shapes, so errors are ValueError/TypeError before the graph runs. Attributes reach
    # the rules by name (every binding of the generated infer_shape/python_bindings.h takes them so).
    dims = [[-1 if d is None else int(d) for d in s] for s in shapes]
    getattr(_validate, op)(dims, [dtype_name(t) for t in dtypes], **dict(attr_items))
    return True


def _attribute(op: str, spec: AttrSpec, value: object, backend: str | None) -> object:
    """``value`` checked against the exact type of attribute ``spec`` and returned as that Python
    type: int attributes take integers (not bool, float or str), float attributes ints or floats
    (not bool or str), bool takes bools, str takes str (``TypeError``). Then its domain in the table
    on ``backend`` (``ValueError`` in the table's one wording, as every C++ reader words it)."""
    seen = f"got {type(value).__name__} {value!r}"
    is_bool = isinstance(value, (bool, np.bool_))
    if spec.type == "int":
        if is_bool or not isinstance(value, numbers.Integral):
            raise TypeError(f"{op}: attribute '{spec.name}' must be an int, {seen}")
        value = int(value)
    elif spec.type == "float":
        if is_bool or not isinstance(value, numbers.Real):
            raise TypeError(f"{op}: attribute '{spec.name}' must be a float (or int), {seen}")
        try:
            value = float(value)
        except OverflowError:  # an int beyond float64
            value = math.copysign(math.inf, value)
    elif spec.type == "bool":
        if not is_bool:
            raise TypeError(f"{op}: attribute '{spec.name}' must be a bool (True or False), {seen}")
        value = bool(value)
    elif not isinstance(value, str):
        raise TypeError(f"{op}: attribute '{spec.name}' must be a str, {seen}")
    error = spec.error(op, value, backend)
    if error:
        raise ValueError(error)
    return value


def size_argument(owner: str, name: str, value: object) -> int:
    """``value`` as a size of ``owner`` (a Cell's constructor argument): an int, not a bool
    (``TypeError``), in [1, 2**31 - 1] (``ValueError``), the range of the kernels' int32 sizes.
    Checked in Python before any graph exists: a GRAPH-mode compile cannot even hold an int beyond
    int64 (MindSpore fails converting it, before any code of this package runs)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{owner}: argument '{name}' must be an int, got {type(value).__name__} {value!r}")
    if not 1 <= int(value) <= INT32_MAX:
        raise ValueError(f"{owner}: argument '{name}' must be an int in [1, {INT32_MAX}], got {int(value)}")
    return int(value)


def _backend() -> str | None:
    """The backend whose limits (the table's) the attributes must keep: the device target's."""
    target = device_target()
    return target if target in BACKENDS else None


def _attributes(op: str, **values: object) -> dict[str, object]:
    specs = OP_SPECS[op].attrs
    names = [a.name for a in specs]
    unknown = sorted(set(values) - set(names))
    missing = [n for n in names if n not in values]
    if unknown or missing:
        raise TypeError(f"{op}: expected the attributes {names} by keyword, got unknown {unknown}, missing {missing}")
    backend = _backend()
    return {a.name: _attribute(op, a, values[a.name], backend) for a in specs}


# A functools.partial object, not a function: GRAPH mode does not parse it but calls it as plain
# Python while compiling (attribute values are constants), so the check runs at compile time, and
# unlike a cached callable it needs no hashable arguments (a list value is a TypeError naming the
# attribute).
attributes = functools.partial(_attributes)
attributes.__doc__ = """``attributes(op, **values)``: every spec attribute of ``op``, by keyword, checked for its
exact type (``TypeError``) and its domain in the table with the limits of the device target's
backend (``ValueError`` in the table's one wording, naming the op, the attribute, the domain and the
value) and returned as ``{name: plain Python value}`` in spec order, ready for ``validate`` and
``primitive(op, **attrs)``."""


def check_attribute_rules(op: str, attrs: dict[str, object]) -> None:
    """Runs the C++ rules of ``op`` with every input unknown, so the rules its attribute values
    (``attributes``' dict) break on their own raise now: a Cell's constructor reports a bad
    attribute before any tensor is seen (``ValueError`` naming the op and the attribute); the rules
    that also need shapes run again on each call."""
    n = len(OP_SPECS[op].inputs)
    getattr(_validate, op)([[-2]] * n, ["unknown"] * n, **attrs)


def validate(op: str, names: tuple[str, ...], tensors: tuple[Tensor, ...], attrs: dict | None = None) -> bool:
    """Runs the C++ rules of ``op`` on ``tensors`` (input order, argument ``names``) with the
    attribute values ``attrs`` (``attributes``' dict; None for an op without attributes); raises
    ``ValueError``/``TypeError`` naming the op, the argument and the shapes. Works eagerly and
    inside a GRAPH-mode construct or bprop."""
    if len(names) != len(tensors):  # a call site out of step with the table
        raise TypeError(f"{op}: {len(tensors)} tensors for the {len(names)} inputs {names}")
    for name, value in zip(names, tensors):
        check_tensor(op, name, value)
    attr_items = () if attrs is None else tuple(attrs.items())
    return _run_rules(op, tuple(t.shape for t in tensors), tuple(t.dtype for t in tensors), attr_items)


def _per_sequence_hint(lens: np.ndarray, n_tokens: int) -> str:
    """What every rope lengths error adds (worded as the kernels' ``per_sequence_hint``,
    cpu/rope_common.cc): rope's lengths are per sequence; values that look cumulative
    (non-decreasing, ending at n_tokens) in their per-sequence form."""
    hint = " (rope's q_seq_len are per-sequence lengths, not cumulative like the attention ops' actual_seq_lengths"
    lens = lens.astype(np.int64)
    if lens.size > 1 and lens[0] > 0 and lens[-1] == n_tokens and (np.diff(lens) >= 0).all():
        steps = np.diff(np.concatenate([[0], lens[:8]])).tolist()
        more = ", ..." if lens.size > 8 else ""
        hint += f"; these look cumulative: per sequence they are [{', '.join(map(str, steps))}{more}]"
    return hint + ")"


def _check_length_values(op: str, arg: str, lens: np.ndarray, n_tokens: int, max_seq_len: int) -> None:
    bad = np.flatnonzero((lens <= 0) | (lens > max_seq_len))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{op}: {arg}[{i}] = {int(lens[i])} must be in [1, max_seq_len = {max_seq_len}]"
                         + _per_sequence_hint(lens, n_tokens))
    if int(lens.sum()) != n_tokens:
        raise ValueError(f"{op}: sum({arg}) = {int(lens.sum())} must equal n_tokens = {n_tokens}"
                         + _per_sequence_hint(lens, n_tokens))


def kernel_lengths(op: str, arg: str, value: Tensor) -> Tensor:
    """An int lengths tensor as the kernel of ``op`` reads it. int64 passes unchanged where the
    kernel reads int64 (CPU), so it sees every value as given. Where it reads int32 only (the
    Ascend OpDefs), int64 is saturated to the int32 range before the cast: a plain cast would wrap
    2**32 + 2 into a valid 2, a saturated value stays outside every valid range."""
    if value.dtype == ms.int64 and not reads_int64(op, arg):
        low, high = Tensor(INT32_MIN, ms.int64), Tensor(INT32_MAX, ms.int64)
        return msops.minimum(msops.maximum(value, low), high).astype(ms.int32)
    return value


def seq_lengths(op: str, arg: str, value: object) -> Tensor:
    """``value`` (a Python sequence, NumPy array or int tensor of per-sequence lengths) as an int
    tensor input. Only its structure is checked here; call :func:`check_seq_length_values` after
    the shape rules, so a wrong rank is reported as such and not as a lengths mismatch."""
    if isinstance(value, Tensor):
        return kernel_lengths(op, arg, value)
    return Tensor(_length_list(op, arg, value, "lengths").astype(np.int32))


def check_seq_length_values(op: str, arg: str, value: object, n_tokens: int, max_seq_len: int) -> None:
    """Python lengths: every entry in [1, max_seq_len], sum = n_tokens (``ValueError``). Tensor
    values are checked by the kernel when it runs (``RuntimeError`` naming the op), since inside a
    compiled graph they are not known before."""
    if not isinstance(value, Tensor):
        _check_length_values(op, arg, _length_list(op, arg, value, "lengths"), n_tokens, max_seq_len)


def _length_list(op: str, arg: str, value: object, what: str) -> np.ndarray:
    """A Python sequence / NumPy array of lengths as a 1-D integer array (``TypeError``/``ValueError``)."""
    if not isinstance(value, (Sequence, np.ndarray)) or isinstance(value, (str, bytes)):
        raise TypeError(f"{op}: argument '{arg}' must be a sequence of ints or an int tensor, "
                        f"got {type(value).__name__}")
    lens = np.asarray(value)
    if lens.ndim != 1 or lens.size == 0:
        raise ValueError(f"{op}: argument '{arg}' must be a non-empty 1-D list of {what}, got shape {list(lens.shape)}")
    if lens.dtype.kind not in "iu":
        raise TypeError(f"{op}: argument '{arg}' must hold integers, got {lens.dtype}")
    return lens


def _check_cumulative_values(op: str, arg: str, lens: np.ndarray, total: int) -> None:
    steps = np.diff(np.concatenate([[0], lens.astype(np.int64)]))
    if (steps < 0).any():
        i = int(np.flatnonzero(steps < 0)[0])
        raise ValueError(f"{op}: argument '{arg}' must be non-decreasing cumulative lengths (>= 0; CANN convention: "
                         f"lengths [3, 5] are written [3, 8]), got {arg}[{i}] = {int(lens[i])}")
    if total >= 0 and int(lens[-1]) != total:
        raise ValueError(f"{op}: the last entry of '{arg}' ({int(lens[-1])}) must equal the number of tokens "
                         f"{total} (lengths are cumulative, without a leading 0)")


def lengths_input(op: str, arg: str, value: object) -> Tensor:
    """``actual_seq_lengths_*`` (cumulative in TND, per batch in BSND) as a kernel input: an int
    tensor as it is, a Python sequence or NumPy array (structure checked here) as an int32 tensor.
    Call :func:`check_cumulative_values` / :func:`check_batch_lengths` after the shape rules."""
    if isinstance(value, Tensor):
        return value
    return Tensor(_length_list(op, arg, value, "lengths").astype(np.int32))


def check_cumulative_values(op: str, arg: str, value: object, total: int | None) -> None:
    """Python cumulative lengths: non-decreasing, last entry = ``total`` tokens (when not None)
    (``ValueError``). Tensor values are checked by the kernel (``RuntimeError``)."""
    if value is not None and not isinstance(value, Tensor):
        lens = _length_list(op, arg, value, "cumulative lengths")
        _check_cumulative_values(op, arg, lens, -1 if total is None else int(total))


def check_batch_lengths(op: str, arg: str, value: object, padded: int | None) -> None:
    """Python BSND lengths (one per batch, docs/contract.md section 0.3): each the valid length of
    a batch row of ``padded`` rows, in [0, padded] (``ValueError``; the count is the shape rules').
    Tensor values are checked by the kernel (``RuntimeError``)."""
    if value is None or isinstance(value, Tensor):
        return
    lens = _length_list(op, arg, value, "per-batch lengths").astype(np.int64)
    bad = np.flatnonzero((lens < 0) | (lens > (np.iinfo(np.int64).max if padded is None else padded)))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{op}: {arg}[{i}] = {int(lens[i])} must be in [0, {padded}] in BSND layout (per-batch "
                         f"valid lengths of the padded batch rows of {padded}; cumulative lengths are TND's)")
