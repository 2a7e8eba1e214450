"""Every public Cell of ``ms_grad_ops.nn`` trained the way MindSpore users train: one SGD step per
(Cell, PyNative / GRAPH_MODE / ``@ms.jit``, BSND / TND where the Cell has layouts, float16 /
bfloat16 / float32), Dense layers in front, every gradient and the Cell's forward against the
float64 reference. The matrix is generated from the package (``_cell_matrix``): a new public Cell
without a builder, or a new dtype in the table, cannot be left out silently."""
from __future__ import annotations

import inspect

import pytest
from _cell_matrix import BUILDERS, LAYOUTS, MODES, matrix, public_cells, train_step

from ms_grad_ops._specs import FLOATS, OP_SPECS

CASES = list(matrix())


def test_every_public_cell_is_in_the_matrix() -> None:
    names = {c.__name__ for c in public_cells()}
    assert names - set(BUILDERS) == set(), "public Cells without a training case"
    assert set(BUILDERS) - names == set(), "builders of Cells that are not public"
    # ContextParallelPlan is exported too, but is no Cell
    assert {"DSAttention", "ContextParallelDSAttention", "RotaryEmbedding"} <= names


def test_axes_come_from_the_table() -> None:
    """Each builder's ops exist; a Cell whose constructor takes ``layout`` (directly, or through the
    DSAttention it wraps) runs both layouts; every float dtype of the table is trained."""
    for name, builder in BUILDERS.items():
        assert all(op in OP_SPECS for op in builder.ops), name
        cell = next(c for c in public_cells() if c.__name__ == name)
        takes_layout = {"layout", "attn"} & set(inspect.signature(cell.__init__).parameters)
        assert builder.layouts == (LAYOUTS if takes_layout else (None,)), name
        assert builder.dtypes == FLOATS, name
    assert len(CASES) == sum(len(b.layouts) * len(b.dtypes) * len(MODES) for b in BUILDERS.values())


@pytest.mark.parametrize(("cell", "mode", "layout", "dtype"), CASES,
                         ids=[f"{c}-{m}-{lay or 'noLayout'}-{d}" for c, m, lay, d in CASES])
def test_one_training_step(cell: str, mode: str, layout: str | None, dtype: str) -> None:
    train_step(BUILDERS[cell].build(layout, dtype), mode)
