"""How the package's Cells meet MindSpore's automatic mixed precision (``ms.amp``).

- O1 (``auto_mixed_precision(net, "O1")``) rewrites the Python source of every Cell it meets
  (``mindspore.rewrite``: re-emitted in a module of its own, casts inserted around whitelisted
  operators). That cannot work for a package: the re-emitted source imports this package's modules
  by file name (an editable install's import hook is not found) and loses their module-level
  names. Every public Cell here is therefore a leaf to the rewrite (:func:`rewrite_leaf`): O1
  changes nothing inside it.
- O2/O3 and ``build_train_network`` call ``Cell.to_float``, which flags every Cell, recursively, to
  cast its float inputs to float16/bfloat16 (in PyNative the inputs of every operator run inside
  it, those of child Cells included, until a child with a precision of its own takes over).
  ``DSAttention`` takes those flags like any MindSpore layer (its projections then run in float16)
  and casts what its kernels need itself; a :class:`KernelCell` takes none.

A :class:`KernelCell` is a Cell whose body is the fused kernels: they take float16, bfloat16 and
float32 as given (float32 arithmetic whatever the storage), their softmax statistics are float32
only, and nothing inside is an operator amp knows. It has the precision "not set" of its own
(nothing is cast inside it, PyNative and GRAPH) and ignores ``to_float``: its kernels get exactly
the dtypes the Cell is given. docs/dsattention.md, "Mixed precision", has what each level does.
"""
from __future__ import annotations

from mindspore import nn
from mindspore._c_expression import MixedPrecisionType
from mindspore.rewrite.common import namespace as _rewrite_namespace

_PRECISION_FLAGS = ("fp16", "bf16", "fp32")


def rewrite_leaf(cls: type[nn.Cell]) -> type[nn.Cell]:
    """Class decorator: ``mindspore.rewrite`` (amp O1) calls instances of ``cls`` as they are, without
    re-emitting or parsing their source. MindSpore 2.10 has no public switch for this: it is the
    rewrite's own list of Cell types it treats as leaves (``CellList``, ``SequentialCell``)."""
    if cls not in _rewrite_namespace._subtree_black_list:
        _rewrite_namespace._subtree_black_list.append(cls)
    return cls


@rewrite_leaf
class KernelCell(nn.Cell):
    """A Cell that no amp level changes (see the module docstring)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        # Not None: MindSpore then enters this precision, "no casts", for the Cell's body.
        self.mixed_precision_type = MixedPrecisionType.NOTSET

    def add_flags_recursive(self, **flags: object) -> KernelCell:
        """As ``nn.Cell.add_flags_recursive``, without the precision flags of ``Cell.to_float``."""
        return super().add_flags_recursive(**{k: v for k, v in flags.items() if k not in _PRECISION_FLAGS})
