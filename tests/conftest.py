"""Test setup: run in a temporary directory (GRAPH failures write rank_0/ into the cwd), on CPU.

The shared helpers live in tests/support/ (``_util``, ``_paths``, oracles, case makers, workers):
put on sys.path here, so every test folder imports them by module name."""
from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import mindspore as ms
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))
ms.set_device("CPU")


@pytest.fixture(scope="session", autouse=True)
def _work_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))
    yield
    os.chdir(old)


@pytest.fixture(params=["pynative", "graph"])
def exec_mode(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs the test once in PyNative and once in GRAPH mode (restoring PyNative after)."""
    ms.set_context(mode=ms.GRAPH_MODE if request.param == "graph" else ms.PYNATIVE_MODE)
    yield request.param
    ms.set_context(mode=ms.PYNATIVE_MODE)
