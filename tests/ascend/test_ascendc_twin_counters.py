"""The twin's work counters (ascendc/twin/twin_context.h ``Counter``, read by
``ascendc_harness.twin_counters``), checked exactly on small launches whose work is known from the
shape alone: the cube MACs, Matmul calls and GM bytes of dense_lightning_indexer_softmax_lse (one
Matmul Sx = q_index Kiᵀ per token and key chunk, its [Nidx, cols] float32 result read back row by
row, a weights row read and two float32 statistics written per token) and the GM bytes of
cla_gate_merge (a vector kernel: every input element read once, every output element written
once). The counts must also be where the work runs (cube on the AICs, vector on the AIVs) and not
depend on the core count."""
from __future__ import annotations

import math

import numpy as np
import pytest
from ascendc_harness import twin_cla_gate as cla
from ascendc_harness import twin_counters as tc
from ascendc_harness import twin_dense_indexer as dense
from ascendc_harness import twin_lib as twin
from test_ascendc_cla_gate import inputs as cla_inputs
from test_ascendc_dense_lightning_indexer_softmax_lse import problem as dli_problem

MAC_NAME = {"float16": "cube_macs_f16", "bfloat16": "cube_macs_bf16"}


def dli_expected(p: dense.DliProblem, key_chunk: int) -> dict[str, int]:
    """The counts of one TND single-sequence causal launch, from the shape: token t sees t + 1 keys."""
    t1, n_idx, d_idx = p.query_index.shape
    wbytes = 4 if p.wdtype == "float32" else 2
    macs = calls = reads = writes = ws = 0
    for t in range(t1):
        visible = t + 1
        for c0 in range(0, visible, key_chunk):
            cols = min(key_chunk, visible - c0)
            macs += n_idx * cols * d_idx
            calls += 1
            reads += 2 * n_idx * d_idx + 2 * cols * d_idx  # Matmul A (q_index rows), B (key_index rows)
            writes += 4 * n_idx * cols  # Matmul C: Sx into the AIV's workspace
            reads += 4 * n_idx * cols  # Sx read back, one head row at a time
            ws += 4 * n_idx * cols  # both in the workspace
        reads += wbytes * n_idx  # the token's weights
        writes += 2 * 4  # softmax_max_index, softmax_sum_index
    return {"macs": macs, "calls": calls, "reads": reads, "writes": writes, "workspace": ws}


@pytest.mark.parametrize(("dtype", "wdtype", "tokens"), [("float16", "float32", 7), ("bfloat16", "bfloat16", 600)])
def test_mixed_launch_counts_are_exact(dtype: str, wdtype: str, tokens: int) -> None:
    p = dli_problem(3, dtype, wdtype, "TND", lens_q=[tokens], lens_k=[tokens], nidx=4, didx=16)
    key_chunk = dense.dli_schedule(p, 8).key_chunk
    if tokens > key_chunk:
        assert math.ceil(tokens / key_chunk) > 1, "the long case spans several key chunks"
    want = dli_expected(p, key_chunk)
    totals = []
    for cores in (1, 8):
        dense.dense_lightning_indexer_softmax_lse(p, cores)
        got = tc.last_counters()
        used = dense.dli_schedule(p, cores).used_aic
        assert got.kinds == ("aic", "aiv", "aiv") * used and list(got.block_idx[:3]) == [0, 0, 1]
        assert got.total(MAC_NAME[dtype], "aic") == got.total(MAC_NAME[dtype]) == want["macs"]
        other = next(n for d, n in MAC_NAME.items() if d != dtype)
        assert got.total(other) == 0
        assert got.total("matmul_calls", "aic") == got.total("matmul_calls") == want["calls"]
        assert got.total("matmul_waits", "aiv") == got.total("matmul_waits") == want["calls"]
        assert got.total("gm_write_bytes") == want["writes"]
        assert got.total("gm_atomic_bytes") == 0
        assert got.total("gm_workspace_write_bytes") == got.total("gm_workspace_read_bytes") == want["workspace"]
        # The lengths are read with scalar GetValue (int32); everything else is DMA or Matmul.
        assert got.total("gm_read_bytes") == want["reads"] + 4 * got.total("gm_scalar_accesses")
        assert got.total("vector_elems", "aic") == got.total("vector_calls", "aic") == 0
        assert got.total("vector_elems", "aiv") >= tokens * (tokens + 1) // 2 * 4 * 3  # relu, muls, add per head
        assert got.total("sync_alls") == got.total("cross_core_waits") == 0
        totals.append(got.totals())
    assert totals[0] == totals[1], "the work does not depend on the core count"


@pytest.mark.parametrize("arch", [twin.ARCH_A2, twin.ARCH_950])
def test_vector_launch_counts_are_exact(arch: int) -> None:
    t, n, d = 37, 3, 128
    _, og, ol, zg, zl = cla_inputs(t, n, d, "bfloat16", seed=5)
    cla.cla_gate_merge("bfloat16", og, ol, zg, zl, core_num=8, arch=arch)
    got = tc.last_counters()
    assert set(got.kinds) == {"vector"} and list(got.block_idx) == list(range(len(got.kinds)))
    assert got.total("gm_read_bytes") == 2 * (2 * t * n * d + 2 * t * n)  # O_g, O_l, z_g, z_l once each
    assert got.total("gm_write_bytes") == 2 * t * n * d
    assert got.total("gm_workspace_read_bytes") == got.total("gm_workspace_write_bytes") == 0
    assert got.total("cube_macs_f16") == got.total("cube_macs_bf16") == got.total("matmul_calls") == 0
    assert got.total("queue_waits") > 0 and got.total("vector_elems") >= 3 * t * n * d


def test_counter_names_match_the_columns() -> None:
    names = tc.counter_names()
    assert len(names) == len(set(names)) and "cube_macs_bf16" in names and "sync_alls" in names
    assert tc.last_counters().values.shape[1] == len(names)
    assert np.all(tc.last_counters().values >= 0)
