"""Every public signature is the table's (ms_grad_ops/_specs.py): each functional op's parameters,
their order, kinds and defaults are ``OpSpec.signature()`` (its inputs, the trailing optional ones
defaulting to None, then its attributes keyword-only, a required attribute without default), and
each op's Cell (``OpSpec.cell``) takes the op's attributes in its constructor in table order with
the table's defaults (then Cell-only parameters with defaults of their own) and the op's inputs in
its construct. The docs pages show the same signature (generated from the table)."""
from __future__ import annotations

import inspect

import pytest

import ms_grad_ops as mgo
from ms_grad_ops._specs import OP_SPECS
from ms_grad_ops.nn._amp import KernelCell

CELL_OPS = [name for name, spec in OP_SPECS.items() if spec.cell]


def _params(fn: object) -> list[tuple[str, object, object]]:
    """(name, kind, default) of every parameter but self; annotations are the code's own business."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values() if p.name != "self"]


@pytest.mark.parametrize("op", list(OP_SPECS))
def test_functional_op_signature_is_the_tables(op: str) -> None:
    want = [(p.name, p.kind, p.default) for p in OP_SPECS[op].signature().parameters.values()]
    assert _params(getattr(mgo.ops, op)) == want


@pytest.mark.parametrize("op", CELL_OPS)
def test_cell_constructor_takes_the_attributes(op: str) -> None:
    spec, cell = OP_SPECS[op], getattr(mgo.nn, OP_SPECS[op].cell)
    if "__init__" not in vars(cell):  # the KernelCell constructor: only for an op without attributes
        assert not spec.attrs, f"{spec.cell} takes no attributes, {op} has {[a.name for a in spec.attrs]}"
        return
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    want = [(p.name, p.kind, p.default) for p in spec.attrs_parameters(kind)]
    got = _params(cell.__init__)
    assert got[:len(want)] == want
    extra = got[len(want):]
    assert all(default is not inspect.Parameter.empty for _, _, default in extra), \
        f"{spec.cell}: Cell-only parameters follow the table's attributes and have defaults: {extra}"


@pytest.mark.parametrize("op", CELL_OPS)
def test_cell_construct_takes_the_inputs(op: str) -> None:
    spec = OP_SPECS[op]
    want = [(p.name, p.kind, p.default) for p in spec.inputs_parameters()]
    assert _params(getattr(mgo.nn, spec.cell).construct) == want


def test_every_kernel_cell_is_an_ops_cell() -> None:
    """Every public Cell running one kernel (a ``KernelCell``) is the ``cell`` of its op in the
    table, so the tests above hold it to the table."""
    kernel_cells = {name for name in mgo.nn.__all__ if issubclass(getattr(mgo.nn, name), KernelCell)}
    assert {OP_SPECS[op].cell for op in CELL_OPS} == kernel_cells
