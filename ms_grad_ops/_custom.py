"""Builds the ``ops.Custom`` primitive of an op for the current device target.

Primitives are built lazily (first use) and cached per (op, device target, attributes), because
``ops.Custom`` fixes the backend when it is constructed.

- CPU: ``func="<absolute path of the packaged kernel library>:<OpType>"``, ``func_type="aot"``,
  ``reg_info`` declaring every input, output, attribute and dtype combination, and no
  ``out_shape``/``out_dtype``, so MindSpore calls the library's ``<OpType>InferShape`` and
  ``<OpType>InferType`` (the shared C++ rules of ``infer_shape/``).
- Ascend: ``func="<OpType>"`` from the custom op package built by ``scripts/build_ascend.sh``
  (found through ``ASCEND_CUSTOM_OPP_PATH``, see ``ms_grad_ops/__init__.py``); MindSpore calls
  ``aclnn<OpType>``. MindSpore requires Python ``out_shape``/``out_dtype`` callables for such
  ops; they call the same ``infer_shape/`` rules through the ``_validate`` module, with every
  attribute of the spec by name. The reg_info names come from the same table as the OpDef's,
  with the dtypes the OpDef declares. Every op has a kernel in the package.

Either way the primitive of a differentiable forward op carries our fused grad kernel as its
``bprop`` (``_bprops.py``, which gets the grad primitive from here), so ``ms.grad`` works through
the functional ops as through the Cells.
"""
from __future__ import annotations

import functools
import importlib.machinery
from pathlib import Path

import mindspore as ms
from mindspore import ops
from mindspore.ops import CustomRegOp

from . import _validate
from ._bprops import bprop_of, grad_op
from ._dtypes import dtype_name, ms_dtype, reg_data_type
from ._specs import OP_SPECS, OpSpec

_PACKAGE_DIR = Path(__file__).resolve().parent

@functools.cache
def cpu_library() -> Path:
    """Absolute path of the packaged CPU kernel library."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = _PACKAGE_DIR / f"_cpu_kernels{suffix}"
        if path.exists():
            return path
    raise RuntimeError(f"ms_grad_ops: the CPU kernel library is missing from {_PACKAGE_DIR}; "
                       "install the package with `pip install .` so it is built")


def device_target() -> str:
    """The device target MindSpore runs on ("CPU", "Ascend", ...)."""
    return ms.get_context("device_target")


def reg_info(spec: OpSpec, target: str, attrs: dict[str, object]) -> dict:
    """reg_info of ``spec`` for ``target``, with ``attrs`` as the attribute values."""
    reg = CustomRegOp(spec.op_type)
    for i, name in enumerate(spec.inputs):
        reg = reg.input(i, name)
    for i, name in enumerate(spec.outputs):
        reg = reg.output(i, name)
    for attr in spec.attrs:
        reg = reg.attr(attr.name, "required", attr.type, value=attrs[attr.name])
    for combo in spec.ascend_dtypes if target == "Ascend" else spec.dtypes:
        reg = reg.dtype_format(*(reg_data_type(t) for t in combo))
    return reg.target(target).get_op_info()


def _attr_values(spec: OpSpec, attrs: dict[str, object]) -> dict[str, object]:
    """Every attribute of ``spec``: the given ones, the table's defaults for the others (a required
    one must be given)."""
    unknown = set(attrs) - {a.name for a in spec.attrs}
    missing = [a.name for a in spec.attrs if a.required and a.name not in attrs]
    if unknown or missing:
        raise TypeError(f"{spec.name}: unknown attribute(s) {sorted(unknown)}, missing required attribute(s) "
                        f"{missing}")
    return {a.name: attrs.get(a.name, a.default) for a in spec.attrs}


def ascend_infer(spec: OpSpec, attrs: dict[str, object]) -> tuple:
    """(out_shape, out_dtype) callables for an Ascend Custom op, running the ``infer_shape/``
    rules of ``spec`` (shapes with unknown dtypes, then dtypes with unknown shapes)."""
    rules = getattr(_validate, spec.name)
    # Every binding takes all the spec's attributes under their names (the generated infer_shape/python_bindings.h).
    attr_values = {a.name: attrs[a.name] for a in spec.attrs}
    single = len(spec.outputs) == 1

    def out_shape(*shapes: list[int]) -> object:
        out = rules([list(x) for x in shapes], ["unknown"] * len(shapes), **attr_values)[0]
        return out[0] if single else tuple(out)

    def out_dtype(*dtypes: ms.dtype) -> object:
        names = rules([[-2]] * len(dtypes), [dtype_name(t) for t in dtypes], **attr_values)[1]
        out = tuple(ms_dtype(n) for n in names)
        return out[0] if single else out

    return out_shape, out_dtype


@functools.cache
def _build(name: str, target: str, attr_items: tuple[tuple[str, object], ...]) -> ops.Custom:
    if target not in ("CPU", "Ascend"):
        raise RuntimeError(f"{name}: device target {target!r} is not supported (CPU and Ascend are)")
    spec = OP_SPECS[name]
    attrs = dict(attr_items)
    pairing = grad_op(name, attrs)
    bprop = bprop_of(name, None if pairing is None else primitive(pairing[0], **pairing[1]))
    if target == "Ascend":
        if not spec.ascend_dtypes:  # no OpDef in the custom op package: say so before MindSpore looks it up
            raise RuntimeError(f"{name}: no Ascend kernel yet (the table declares no Ascend dtypes); it runs on CPU")
        out_shape, out_dtype = ascend_infer(spec, attrs)
        return ops.Custom(spec.op_type, out_shape=out_shape, out_dtype=out_dtype, func_type="aot",
                          reg_info=reg_info(spec, target, attrs), bprop=bprop)
    return ops.Custom(f"{cpu_library()}:{spec.op_type}", out_shape=None, out_dtype=None, func_type="aot",
                      reg_info=reg_info(spec, target, attrs), bprop=bprop)


def _primitive(name: str, attr_items: tuple[tuple[str, object], ...]) -> ops.Custom:
    values = _attr_values(OP_SPECS[name], dict(attr_items))
    return _build(name, device_target(), tuple(values.items()))


# Cached at this level too: inside a GRAPH-mode construct MindSpore runs a cached callable as
# plain Python at compile time (JIT fallback) instead of parsing it, and ms.get_context cannot
# be parsed. The device target is read once per (op, attributes); it is fixed in a process.
_primitive_cached = functools.lru_cache(maxsize=None)(_primitive)


@functools.cache
def reads_int64(name: str, arg: str) -> bool:
    """Whether the kernel of op ``name`` on the current device target takes input ``arg`` as int64
    (the CPU kernels read int32 and int64 lengths; the Ascend OpDefs declare int32 only). Cached
    like ``_primitive_cached``, so a GRAPH-mode construct can call it."""
    spec = OP_SPECS[name]
    i = spec.inputs.index(arg)
    return any(combo[i] == "int64" for combo in (spec.ascend_dtypes if device_target() == "Ascend" else spec.dtypes))


def primitive(name: str, **attrs: object) -> ops.Custom:
    """The cached ``ops.Custom`` of op ``name`` for the current device target."""
    return _primitive_cached(name, tuple(sorted(attrs.items())))
