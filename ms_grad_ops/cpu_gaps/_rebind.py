"""Binds replacements onto every module attribute that holds a MindSpore object, and back.

``rebind({original: replacement})`` scans ``sys.modules`` once and rebinds each attribute whose
value *is* an original (whatever its name there: ``from mindspore.ops.auto_generate import
RmsNorm as Norm`` is found too), in MindSpore's own modules and in user code imported before;
modules imported afterwards take the replacements from MindSpore's namespaces. ``restore()`` puts
the originals back where a replacement is still bound.
"""
from __future__ import annotations

import sys

# (module name, attribute name) -> the original it held.
_saved: dict[tuple[str, str], object] = {}
_OWN = __name__.rsplit(".", 2)[0]  # "ms_grad_ops": its modules hold the originals on purpose


def rebind(replacements: dict[int, tuple[object, object]]) -> None:
    """``replacements``: ``id(original) -> (original, replacement)``."""
    for module_name, module in list(sys.modules.items()):
        if module_name == _OWN or module_name.startswith(_OWN + "."):
            continue
        attrs = getattr(module, "__dict__", None)
        if not isinstance(attrs, dict):
            continue
        for name, value in list(attrs.items()):
            hit = replacements.get(id(value))
            if hit is not None and hit[0] is value:
                _saved[(module_name, name)] = value
                setattr(module, name, hit[1])


def saved_original(module_name: str, name: str) -> object | None:
    """The original a rebound attribute held, or None when it was not rebound."""
    return _saved.get((module_name, name))


def restore(replacement_ids: set[int]) -> None:
    """Puts back the originals wherever a replacement (by id) is still bound."""
    for (module_name, name), original in list(_saved.items()):
        module = sys.modules.get(module_name)
        if module is not None and id(getattr(module, name, None)) in replacement_ids:
            setattr(module, name, original)
        del _saved[(module_name, name)]


def rebound() -> bool:
    return bool(_saved)
