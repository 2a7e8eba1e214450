"""``examples/hf_release_layer.py`` imported as a module: its synthetic DeepSeek-V3.2 release writer
(safetensors written by hand, with FP8/bfloat16 tensors and holes) serves the loader tests."""
from __future__ import annotations

import importlib.util

from _paths import EXAMPLES

_spec = importlib.util.spec_from_file_location("hf_release_layer", EXAMPLES / "hf_release_layer.py")
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)
