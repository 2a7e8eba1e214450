"""ms_grad_ops: fused backward operators for long-context transformer training in MindSpore.

``ms_grad_ops.ops`` holds the functional ops, ``ms_grad_ops.nn`` the Cells whose backward runs
our fused kernels, ``ms_grad_ops.reference`` the float64 NumPy oracle. ``builtins`` MindSpore's built-in
``sparse_flash_attention``/``lightning_indexer`` on these kernels (``builtins.install()``),
``preflight`` host-side checks of a batch's indices and lengths before a step. ``ops``, ``nn``,
``builtins`` and ``preflight`` import MindSpore on first access; ``reference`` is pure NumPy.
"""
from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

__version__ = "0.1.0"
__all__ = ["builtins", "nn", "ops", "preflight", "reference"]

_VENDOR_DIR = Path(__file__).resolve().parent / "vendors"


def _register_ascend_vendor() -> None:
    """Puts the custom op package built by scripts/build_ascend.sh on ASCEND_CUSTOM_OPP_PATH."""
    if not _VENDOR_DIR.is_dir():
        return
    for vendor in sorted(p for p in _VENDOR_DIR.iterdir() if p.is_dir()):
        paths = [p for p in os.environ.get("ASCEND_CUSTOM_OPP_PATH", "").split(":") if p]
        if str(vendor) not in paths:
            os.environ["ASCEND_CUSTOM_OPP_PATH"] = ":".join([str(vendor), *paths])


_register_ascend_vendor()


def __getattr__(name: str) -> ModuleType:
    if name in __all__:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'ms_grad_ops' has no attribute {name!r}")
