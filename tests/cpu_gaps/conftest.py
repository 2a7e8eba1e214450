"""Every test here runs with ms_grad_ops.cpu_gaps installed (the stand-ins bound on CPU), and
unbound after it."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from ms_grad_ops import cpu_gaps


@pytest.fixture(autouse=True)
def _stand_ins_installed() -> Iterator[None]:
    assert cpu_gaps.install()
    yield
    cpu_gaps.uninstall()
