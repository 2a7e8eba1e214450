"""Where things are in the repository, for tests that build, run or read files by path (C++ sources,
worker scripts, the examples, the docs): one place that knows the layout. Plain paths: no imports
beyond pathlib, so subprocess workers and text-only checks can use it too."""
from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent  # tests/support: shared helpers, oracles, workers
TESTS = SUPPORT.parent
ROOT = TESTS.parent  # the repository
ASCEND = TESTS / "ascend"  # Ascend C twin tests, ascendc_harness/, cann_stub/
CPP = TESTS / "cpu" / "cpp"  # C++ sources of the CPU platform tests
SCRIPTS = ROOT / "scripts"  # tooling
EXAMPLES = ROOT / "examples"  # user-facing scripts (demos, parallel training)
