"""Property-based fuzz suite of the fourteen ops (hypothesis).

Per op: random valid calls (shapes, dtypes, layouts, lengths as lists / int32 / int64 tensors or
None, sparse indices with -1 anywhere, empty batches, K above the visible keys) must match the
float64 reference; random malformed calls (rank, shape, dtype, attribute type and range, lengths,
indices, half of an optional pair) must raise ValueError / TypeError / RuntimeError naming the op.
Every case runs in a long-lived worker subprocess (tests/support/_fuzz_worker.py): a crash or a hang fails
the case and the worker is restarted, so it cannot end the run.

CI runs a fixed set (``derandomize``): MGO_FUZZ_EXAMPLES examples per test (default 64, about
1800 cases in all; the last test asserts and prints the count). Longer local runs draw fresh cases:
    pytest tests/all_ops/test_fuzz_ops.py --hypothesis-seed=12345            # another fixed sample
    MGO_FUZZ_EXAMPLES=1000 pytest tests/all_ops/test_fuzz_ops.py --hypothesis-seed=$RANDOM
(``--hypothesis-seed`` switches ``derandomize`` off, so the seed decides the cases.)
"""
from __future__ import annotations

import collections
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator

import pytest
from _paths import SUPPORT
from hypothesis import HealthCheck, core, given, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("MGO_FUZZ_EXAMPLES", "64"))
GRAPH_EXAMPLES = max(2, EXAMPLES // 8)
CASE_TIMEOUT = 120.0   # seconds; a GRAPH compile under load takes a few
PREFIX = "@@fuzz@@ "
OPS = ("rope", "rope_grad", "cla_gate_merge", "cla_gate_backward", "sparse_flash_attention",
       "sparse_flash_attention_grad", "lightning_indexer", "lightning_indexer_grad",
       "sparse_lightning_indexer_grad_kl_loss", "dense_lightning_indexer_softmax_lse",
       "dense_lightning_indexer_grad_kl_loss", "sparse_flash_mla", "sparse_flash_mla_grad",
       "sparse_lightning_indexer_kl_loss_grad")
COUNTS: dict[str, int] = {}
OUTCOMES: collections.Counter = collections.Counter()   # "mutation kind -> exception type" of malformed cases

FUZZ = settings(max_examples=EXAMPLES, derandomize=core.global_force_seed is None, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


class Worker:
    """The worker subprocess; ``run`` sends one case and waits for its answer."""

    def __init__(self) -> None:
        self.cwd = tempfile.mkdtemp(prefix="mgo_fuzz_")
        self.proc: subprocess.Popen | None = None
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.restarts = 0

    def _start(self) -> None:
        # env=os.environ: `import mindspore` set OMP_NUM_THREADS=1 in C for this process only.
        self.proc = subprocess.Popen([sys.executable, str(SUPPORT / "_fuzz_worker.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=self.cwd,
                                     env=dict(os.environ))
        self.lines = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self.lines), daemon=True).start()
        ready = self._answer(300.0)
        assert ready and ready.get("ready"), "the fuzz worker did not start"

    @staticmethod
    def _read(proc: subprocess.Popen, lines: queue.Queue) -> None:
        for line in proc.stdout:
            if line.startswith(PREFIX):
                lines.put(line[len(PREFIX):])
        lines.put(None)   # EOF: the worker died

    def _answer(self, timeout: float) -> dict | None:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            return {"hang": True}
        return None if line is None else json.loads(line)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def run(self, case: dict) -> tuple[bool, str]:
        if self.proc is None:
            self._start()
        self.proc.stdin.write(json.dumps(case) + "\n")
        self.proc.stdin.flush()
        answer = self._answer(CASE_TIMEOUT)
        if answer is None or answer.get("hang"):
            what = "crashed (worker died)" if answer is None else f"hung (> {CASE_TIMEOUT:.0f} s)"
            self.stop()
            self.restarts += 1
            return False, what
        return answer["ok"], answer["detail"]


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    w = Worker()
    yield w
    w.stop()


def _check(worker: Worker, case: dict) -> None:
    COUNTS[case["op"]] = COUNTS.get(case["op"], 0) + 1
    ok, detail = worker.run(case)
    if ok and case["kind"] == "malformed":
        OUTCOMES[f"{case['mutation'][0]} -> {detail.split(': ')[1] if ': ' in detail else detail}"] += 1
    assert ok, f"{case['op']} {case['kind']} ({case['mode']}): {detail}\ncase: {json.dumps(case)}"


# ---------------------------------------------------------------- strategies
FLOATS = st.sampled_from(["float32", "float16", "bfloat16"])


@st.composite
def rope_cfg(draw: st.DrawFn) -> dict:
    msl = draw(st.integers(1, 6))
    return {"lens": draw(st.lists(st.integers(1, msl), min_size=1, max_size=3)), "max_seq_len": msl,
            "heads": draw(st.integers(1, 2)), "dtype": draw(FLOATS), "cos_dtype": draw(FLOATS),
            "lens_as": draw(st.sampled_from(["list", "int32", "int64"])), "mode": draw(st.sampled_from(["atb", "vjp"]))}


@st.composite
def cla_cfg(draw: st.DrawFn) -> dict:
    return {"t": draw(st.integers(1, 6)), "n": draw(st.integers(1, 4)), "d": draw(st.integers(1, 40)),
            "dtype": draw(FLOATS), "zscale": draw(st.sampled_from([1.0, 4.0, 16.0]))}


@st.composite
def geometry(draw: st.DrawFn) -> dict:
    """Layout, batches (TND: empty batches allowed, at least one query and one key; BSND: per-batch
    valid lengths, zeros allowed, either alone) and lengths form."""
    layout = draw(st.sampled_from(["TND", "BSND"]))
    if layout == "BSND":
        b, s1, s2 = draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.integers(1, 6))
        lens_as = draw(st.sampled_from(["none", "none", "list", "int32", "int64"]))
        lq = lk = None
        if lens_as != "none":
            given = draw(st.sampled_from(["both", "both", "query", "kv"]))
            lq = draw(st.lists(st.integers(0, s1), min_size=b, max_size=b)) if given != "kv" else None
            lk = draw(st.lists(st.integers(0, s2), min_size=b, max_size=b)) if given != "query" else None
        return {"layout": layout, "b": b, "s1": s1, "s2": s2, "lens_as": lens_as, "lens_q": lq, "lens_kv": lk}
    lens_as = draw(st.sampled_from(["none", "list", "int32", "int64"]))
    nb = 1 if lens_as == "none" else draw(st.integers(1, 3))
    lq = draw(st.lists(st.integers(0, 4), min_size=nb, max_size=nb).filter(lambda x: sum(x) > 0))
    lk = draw(st.lists(st.integers(0, 6), min_size=nb, max_size=nb).filter(lambda x: sum(x) > 0))
    return {"layout": layout, "lens_q": lq, "lens_kv": lk, "lens_as": lens_as}


# Sinks (docs/contract.md section 0.7): absent, random, some -inf (no sink), large positive.
SINKS = st.sampled_from(["none", "none", "random", "neg_inf", "large"])


@st.composite
def sfa_cfg(draw: st.DrawFn) -> dict:
    return {**draw(geometry()), "n2": draw(st.integers(1, 2)), "g": draw(st.integers(1, 3)),
            "d": draw(st.integers(1, 16)), "dr": draw(st.sampled_from([0, 0, 1, 4, 6])), "k": draw(st.integers(1, 6)),
            "bs": draw(st.integers(1, 3)), "mode": draw(st.sampled_from([0, 3])), "value_none": draw(st.booleans()),
            "scale": draw(st.sampled_from([0.125, 0.5, 1.0])), "dtype": draw(FLOATS), "sinks": draw(SINKS)}


# Compressed keys (docs/contract.md section 9.1): original tokens per key, and a residual per batch or none.
CMP_RATIO = st.sampled_from([1, 1, 2, 4])


@st.composite
def indexer_cfg(draw: st.DrawFn) -> dict:
    dtype = draw(FLOATS)
    return {**draw(geometry()), "nidx": draw(st.integers(1, 3)), "didx": draw(st.integers(1, 8)),
            "cmp_ratio": draw(CMP_RATIO), "residual": draw(st.booleans()),
            "k": draw(st.integers(1, 8)), "mode": draw(st.sampled_from([0, 3])), "dtype": dtype,
            "wdtype": draw(st.sampled_from([dtype, "float32"])), "n1": draw(st.integers(1, 3)),
            "d": draw(st.integers(1, 8)), "dr": draw(st.sampled_from([0, 2, 4])),
            "scale": draw(st.sampled_from([0.25, 0.5])), "sinks": draw(SINKS)}


@st.composite
def dense_cfg(draw: st.DrawFn) -> dict:
    return {**draw(indexer_cfg()), "mha": draw(st.booleans())}


@st.composite
def smla_cfg(draw: st.DrawFn) -> dict:
    """sparse_flash_mla(_grad) (docs/contract.md section 8): a case of tests/support/_smla_cases.make_case."""
    layout, kind = draw(st.sampled_from(["TND", "BSND"])), draw(st.sampled_from(["swa", "hca", "csa"]))
    ratio = draw(st.sampled_from([1, 2, 4]))
    nb = draw(st.integers(1, 3))
    lens = draw(st.lists(st.tuples(st.integers(1, 6), st.integers(1, 12)), min_size=nb, max_size=nb))
    pad = draw(st.sampled_from([None, 0, 1]))
    if kind != "swa" and layout == "TND" and not pad and all(s2 < ratio for _, s2 in lens):
        lens[0] = (lens[0][0], ratio)   # TND needs a compressed entry to hold
    n2 = draw(st.integers(1, 2))
    return {"layout": layout, "kind": kind, "ratio": ratio, "lens": lens, "pad": pad, "n2": n2,
            "n1": n2 * draw(st.integers(1, 3)), "d": draw(st.integers(1, 16)), "k": draw(st.integers(1, 6)),
            "win_left": draw(st.sampled_from([-1, 0, 1, 3, 127])), "win_right": draw(st.sampled_from([0, 0, 1, -1])),
            "ori_mask_mode": draw(st.sampled_from([4, 4, 3, 0])), "cmp_mask_mode": draw(st.sampled_from([3, 3, 0])),
            "residual": draw(st.booleans()), "sinks": draw(st.booleans()), "ori_k": draw(st.sampled_from([0, 0, 3])),
            "scale": draw(st.sampled_from([0.125, 0.5, 1.0])), "dtype": draw(FLOATS)}


CFG = {"rope": rope_cfg, "rope_grad": rope_cfg, "cla_gate_merge": cla_cfg, "cla_gate_backward": cla_cfg,
       "sparse_flash_attention": sfa_cfg, "sparse_flash_attention_grad": sfa_cfg,
       "lightning_indexer": indexer_cfg, "lightning_indexer_grad": indexer_cfg,
       "sparse_lightning_indexer_grad_kl_loss": indexer_cfg, "dense_lightning_indexer_softmax_lse": dense_cfg,
       "dense_lightning_indexer_grad_kl_loss": dense_cfg, "sparse_flash_mla": smla_cfg,
       "sparse_flash_mla_grad": smla_cfg, "sparse_lightning_indexer_kl_loss_grad": indexer_cfg}
MUTATION = st.tuples(st.integers(0, 999), st.integers(0, 999))
KINDS = ("rank", "dtype", "dim", "attr_type", "attr_range", "lengths", "indices", "pair")


def _case(op: str, kind: str, mode: str, seed: int, cfg: dict, mutation: tuple | None = None) -> dict:
    # The mutation kind comes from the (uniform) seed: hypothesis favours the first of sampled_from.
    return {"op": op, "kind": kind, "mode": mode, "seed": seed, "cfg": {**cfg, "_graph": mode == "graph"},
            "mutation": [KINDS[seed % len(KINDS)], *mutation] if mutation else None}


# ---------------------------------------------------------------- tests
@pytest.mark.parametrize("op", OPS)
def test_valid_calls_match_the_reference(worker: Worker, op: str) -> None:
    @FUZZ
    @given(cfg=CFG[op](), seed=st.integers(0, 2**31))
    def check(cfg: dict, seed: int) -> None:
        _check(worker, _case(op, "valid", "pynative", seed, cfg))
    check()


@pytest.mark.parametrize("op", OPS)
def test_malformed_calls_raise_errors_naming_the_op(worker: Worker, op: str) -> None:
    @FUZZ
    @given(cfg=CFG[op](), seed=st.integers(0, 2**31), mutation=MUTATION)
    def check(cfg: dict, seed: int, mutation: tuple) -> None:
        _check(worker, _case(op, "malformed", "pynative", seed, cfg, mutation))
    check()


def test_graph_mode_valid_and_malformed(worker: Worker) -> None:
    """The same properties inside compiled graphs (a compile costs seconds: fewer cases)."""
    @settings(FUZZ, max_examples=GRAPH_EXAMPLES)
    @given(op=st.sampled_from(OPS), data=st.data(), seed=st.integers(0, 2**31), malformed=st.booleans())
    def check(op: str, data: st.DataObject, seed: int, malformed: bool) -> None:
        cfg = data.draw(CFG[op]())
        mutation = data.draw(MUTATION) if malformed else None
        _check(worker, _case(op, "malformed" if malformed else "valid", "graph", seed, cfg, mutation))
    check()


def test_zz_case_count(worker: Worker) -> None:
    """Runs last: every case above went through the worker (>= 1000 in CI)."""
    total = sum(COUNTS.values())
    print(f"\nfuzz cases run: {total} ({', '.join(f'{k} {v}' for k, v in sorted(COUNTS.items()))}); "
          f"worker restarts after a crash or hang: {worker.restarts}\n"
          f"malformed outcomes: {dict(sorted(OUTCOMES.items()))}")
    assert set(COUNTS) == set(OPS), f"ops without cases: {set(OPS) - set(COUNTS)}"
    assert total >= min(1000, 16 * EXAMPLES), total
