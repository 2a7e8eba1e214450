"""The integration tests' fixtures: mindformers 2.0.0 installed once per session
(``_mindformers.mindformers_folder``)."""
from __future__ import annotations

from pathlib import Path

import pytest
from _mindformers import mindformers_folder


@pytest.fixture(scope="session")
def mindformers_dir() -> Path:
    return mindformers_folder()
