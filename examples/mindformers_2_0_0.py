"""What MindSpore Transformers (mindformers) 2.0.0 needs from its user to build on CPU.

Pinned to mindformers 2.0.0 (``import_mindformers`` checks the version). None of this is about
MindSpore's operators (``ms_grad_ops.builtins.install()`` supplies those); each item is
mindformers' own packaging or setup, documented in docs/migrating.md:

1. ``mindformers/__init__`` imports its whole tree, which needs packages the training graphs
   never use (tokenizers, datasets, jieba, nltk, ``hyper_parallel`` (not on PyPI), pandas/pyarrow
   builds that need numpy 2 while MindSpore 2.10 needs numpy < 2, ...): ``import_mindformers``
   puts inert stand-in modules in their place, and imports ``mindformers.tools`` first
   (``transformer_config`` alone runs into a circular import).
2. ``MLATransformerConfig`` accepts the ``dsa`` attention variant only at DeepSeek's sizes
   (kv_lora_rank 512, rope 64, indexer 64 x 128): ``dsa_at_any_size`` sets the variant (and the
   BSND layout it implies) after the check.
3. ``DeepseekV3ForCausalLM.__new__`` reads mindformers' global context: ``build_cpu_context``.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

VERSION = "2.0.0"
# Packages mindformers/__init__ pulls in that its training graphs never use. pandas/pyarrow are
# stood in even when installed: the builds mindformers' requirements pick need numpy 2.
_UNUSED = ("jieba", "rouge_chinese", "nltk", "datasets", "tokenizers", "tqdm", "hyper_parallel", "sentencepiece",
           "tiktoken", "mindpet", "tensorboardX", "transformers", "safetensors", "ftfy", "cv2", "setproctitle",
           "jinja2", "astunparse")
_ALWAYS_STOOD_IN = ("pandas", "pyarrow")


class _StandIn(types.ModuleType):
    """A module whose every attribute is an inert class (enough for import-time references)."""

    def __getattr__(self, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        value = type(name, (), {"__init__": lambda self, *a, **k: None})
        setattr(self, name, value)
        return value


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> object:
        if fullname.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StandIn(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def import_mindformers() -> types.ModuleType:
    """``mindformers``, imported past the unused parts of its tree (item 1)."""
    missing = {n for n in _UNUSED if importlib.util.find_spec(n) is None} | set(_ALWAYS_STOOD_IN)
    for name in _ALWAYS_STOOD_IN:
        sys.modules.pop(name, None)
    if not any(isinstance(f, _StandInFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _StandInFinder(missing))
    import mindformers
    import mindformers.tools  # noqa: F401  (first: transformer_config alone runs into a circular import)

    if mindformers.__version__ != VERSION:
        raise RuntimeError(f"this adapter is for mindformers {VERSION}, found {mindformers.__version__}")
    return mindformers


def dsa_at_any_size(config: object) -> object:
    """``config`` (a mindformers model config, e.g. ``DeepseekV3Config``) converting to a
    TransformerConfig with the DSA variant at any size (item 2): the conversion runs without the
    variant, which is set afterwards with the layout it implies. Returns ``config``."""
    convert = config.convert_to_transformer_config

    def convert_with_dsa(is_mla_model: bool = True) -> object:
        transformer_config = convert(is_mla_model)
        transformer_config.experimental_attention_variant = "dsa"
        transformer_config.input_layout = "BSND"
        return transformer_config

    config.convert_to_transformer_config = convert_with_dsa  # this instance only
    return config


def build_cpu_context() -> None:
    """mindformers' global context for a GRAPH-mode CPU run without its legacy API (item 3)."""
    from mindformers.core.context.build_context import build_context

    build_context({"context": {"mode": "GRAPH_MODE", "device_target": "CPU"}, "use_legacy": False, "parallel": {}})
