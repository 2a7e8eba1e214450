"""scripts/bench/ascend_roofline.py's scaling: counted at reduced sizes, fitted on the work units and
evaluated at the full size, it must give exactly the full-size counts of kernels whose work is
known in closed form (dense_lightning_indexer_softmax_lse's MACs and GM bytes; cla_gate_merge's GM
bytes), and the roofline bound must be the largest ceiling."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_ascendc_twin_counters import dli_expected

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def roofline():  # noqa: ANN201
    spec = importlib.util.spec_from_file_location("ascend_roofline", ROOT / "scripts" / "bench" / "ascend_roofline.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["ascend_roofline"] = module
    spec.loader.exec_module(module)
    return module


def kernel(roofline, name: str):  # noqa: ANN001, ANN201
    return next(k for k in roofline.KERNELS if k.name == name)


def test_dense_indexer_scales_to_the_exact_full_size_counts(roofline) -> None:  # noqa: ANN001
    k = kernel(roofline, "dense_lightning_indexer_softmax_lse")
    got = roofline.fit_and_scale(k)
    assert max(got["check_error"].values()) < 1e-9
    s = k.full["s1"]
    macs = sum(roofline.NIDX * (t + 1) * roofline.DIDX for t in range(s))  # one Sx per visible key
    assert got["full"]["macs"] == pytest.approx(macs, rel=1e-9)
    shape_only = SimpleNamespace(query_index=SimpleNamespace(shape=(s, roofline.NIDX, roofline.DIDX)), wdtype="float32")
    want = dli_expected(shape_only, 512)
    assert got["full"]["gm_write_bytes"] == pytest.approx(want["writes"], rel=1e-9)
    assert got["full"]["gm_workspace_read_bytes"] == pytest.approx(want["workspace"], rel=1e-9)


def test_vector_kernel_scales_exactly_and_the_bound_is_the_largest_ceiling(roofline) -> None:  # noqa: ANN001
    k = kernel(roofline, "cla_gate_merge")
    got = roofline.fit_and_scale(k)
    t, n, d = (k.full[x] for x in ("t", "n", "d"))
    assert got["full"]["gm_read_bytes"] == pytest.approx(2 * (2 * t * n * d + 2 * t * n), rel=1e-9)
    assert got["full"]["gm_write_bytes"] == pytest.approx(2 * t * n * d, rel=1e-9)
    for soc in roofline.SOCS:
        b = roofline.bounds(got["full"], soc)
        assert b["cube"] == 0 and b["hbm"] == pytest.approx((6 * t * n * d + 4 * t * n) / (soc.hbm_tbs * 1e12))
        assert max(roofline.CEILINGS, key=b.get) == "hbm"
