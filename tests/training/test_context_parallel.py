"""Context parallelism of ``nn.DSAttention`` (``ContextParallelDSAttention``, ``ContextParallelPlan``).

Single process: the folding and the per-rank lengths of ``ContextParallelPlan``; the wrapper with
its ranks simulated in one process (the all-gather is a concatenation) against ``DSAttention`` on
the whole batch, CP = 2 and 3, TND with uneven lengths and sequences shorter than 2 * CP, BSND.

Over msrun (2 workers on 127.0.0.1, a free port; ``_cp_worker.py``), alone on the machine: the
real collectives (AllGather forward, AllReduce + slice backward) against one process - output,
indexer loss and every parameter gradient within 1e-6 (fp32), the same bits on a second run - and
``examples/dsa_context_parallel.py --cp 2 --layout TND`` training a few steps: parameters bitwise
identical on both ranks, per-step global losses within 1e-6 of the one-process run. Every child
runs in its own process group, is killed with it on timeout or failure, and the teardown checks
that none is left.

A gradient sums one term per token and the terms cancel, so gradient errors are relative to the
terms' magnitude from the float64 oracle (``_dsa_oracle.term_magnitude``); the one-process float32
gradients must match that oracle within 1e-5 first.
"""
from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import _cp_worker as worker
import _dsa_oracle as oracle
import mindspore as ms
import numpy as np
import psutil
import pytest
from _paths import EXAMPLES
from _util import rel_l2
from mindspore import Tensor
from mindspore import ops as msops
from test_dsa_training import TINY, _Child, _free_port

import ms_grad_ops as mgo
from ms_grad_ops.nn import ContextParallelPlan
from ms_grad_ops.nn.cp_plan import chunk_bounds, unshard

SCRIPT = EXAMPLES / "dsa_context_parallel.py"
# SGD with momentum: Adam's sign-like first steps turn rounding-level gradient differences into
# drift (docs/distributed.md, context parallel), which is not what this compares.
TRAIN = [*TINY, "--batch", "4", "--steps", "3", "--layout", "TND", "--optimizer", "momentum", "--lr", "0.1"]


# -- the plan (NumPy only) --------------------------------------------------------------------

def test_chunks_differ_by_at_most_one() -> None:
    assert chunk_bounds(13, 4).tolist() == [0, 4, 7, 10, 13]
    assert chunk_bounds(3, 4).tolist() == [0, 1, 2, 3, 3]
    assert chunk_bounds(0, 4).tolist() == [0, 0, 0, 0, 0]


def test_plan_folds_head_and_tail() -> None:
    """Lengths 13, 3, 1, 22 over 2 ranks (chunks of 4): rank r holds chunks r and 3 - r of each
    sequence; the key segments are global prefixes, so the last key length is their sum, not the
    local token count (what a rewrite forcing it to the local count would make it)."""
    cum = [13, 16, 17, 39]
    plans = [ContextParallelPlan(cum, 2, r) for r in range(2)]
    p0, p1 = plans
    # sequence 0: chunks [0,4) [4,7) [7,10) [10,13); sequence 1 (start 13): [13] [14] [15] []; 2: [16] [] [] [];
    # sequence 3 (start 17): [17,23) [23,29) [29,34) [34,39)
    assert p0.tokens.tolist() == [0, 1, 2, 3, 10, 11, 12, 13, 16, *range(17, 23), *range(34, 39)]
    assert p1.tokens.tolist() == [4, 5, 6, 7, 8, 9, 14, 15, *range(23, 34), -1]
    assert p0.local_tokens == p1.local_tokens == 20          # rank 1 padded by one token
    assert p0.positions.tolist() == [0, 1, 2, 3, 10, 11, 12, 0, 0, *range(6), *range(17, 22)]
    assert p1.positions.tolist() == [4, 5, 6, 7, 8, 9, 1, 2, *range(6, 17), 0]
    assert np.diff([0, *p0.query_lengths]).tolist() == [4, 3, 1, 0, 1, 0, 6, 5, 0]
    assert np.diff([0, *p1.query_lengths]).tolist() == [3, 3, 1, 1, 0, 0, 6, 5, 1]
    assert np.diff([0, *p0.key_lengths]).tolist() == [4, 13, 1, 0, 1, 0, 6, 22, 0]
    assert np.diff([0, *p1.key_lengths]).tolist() == [7, 10, 2, 3, 0, 0, 12, 17, 0]
    for p in plans:
        assert p.key_lengths[-1] == len(p.key_map) != p.local_tokens
        # every key segment is its sequence's prefix, read from the gathered buffer (rank-major, padded)
        gathered = np.concatenate([q.tokens for q in plans])
        starts = np.array([0, 13, 16, 17])
        seq_of_segment = np.repeat(np.arange(4), 2)
        for s, (k0, k1) in enumerate(zip([0, *p.key_lengths[:-2]], p.key_lengths[:-1])):
            assert gathered[p.key_map[k0:k1]].tolist() == list(starts[seq_of_segment[s]] + np.arange(k1 - k0))
    x = np.arange(39 * 2).reshape(39, 2)
    assert np.array_equal(unshard(plans, [p.shard(x, fill=-5) for p in plans]), x)
    padded = [ContextParallelPlan(cum, 2, r, pad_to=23) for r in range(2)]   # as for data x context parallel
    assert padded[0].local_tokens == 23 and (padded[0].tokens[20:] == -1).all()
    gathered = np.concatenate([q.tokens for q in padded])
    assert np.array_equal(gathered[padded[1].key_map], np.concatenate([q.tokens for q in plans])[p1.key_map])
    assert np.array_equal(unshard(padded, [p.shard(x) for p in padded]), x)
    assert (p1.shard(x, fill=-5)[-1] == -5).all()


def test_plan_bsnd_and_errors() -> None:
    p = ContextParallelPlan.bsnd(2, 8, 2, 1)
    assert p.tokens.tolist() == [2, 3, 4, 5, 10, 11, 12, 13] and p.local_tokens == 8
    with pytest.raises(ValueError, match="multiple of 2 \\* cp_size = 4"):
        ContextParallelPlan.bsnd(2, 10, 2, 0)
    with pytest.raises(ValueError, match="rank"):
        ContextParallelPlan([4], 2, 2)
    with pytest.raises(ValueError, match="non-decreasing"):
        ContextParallelPlan([4, 3], 2, 0)


# -- ranks simulated in one process ----------------------------------------------------------

class _OneProcess(NamedTuple):
    attn: mgo.nn.DSAttention
    out: np.ndarray             # [T, dim]
    d_out: np.ndarray
    loss: float                 # the indexer loss
    grads: list[np.ndarray]     # of every trainable parameter, for sum(out * d_out) + indexer_loss
    terms: dict[str, float]     # each gradient's terms' magnitude (_dsa_oracle.term_magnitude)


def _reference(layout: str, sizes: object, init: dict[str, np.ndarray] | None = None, dtype: ms.dtype = ms.float32
               ) -> _OneProcess:
    """DSAttention on the whole batch in one process (parameters from ``init`` when given)."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_seed(1)
    attn = mgo.nn.DSAttention(**worker.CFG, max_seq_len=32, layout=layout, dtype=dtype)
    for p in attn.trainable_params() if init is not None else ():
        p.set_data(Tensor(init[f"init:{p.name}"]))
    x, d_out = worker.case_data(layout, sizes)
    shape = (sizes[0], sizes[1], -1) if layout == "BSND" else x.shape
    lengths = list(sizes) if layout == "TND" else None

    def objective(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        out, loss = attn(x, lengths)
        return (out * Tensor(d_out.reshape(shape))).sum() + loss.sum(), out, loss

    (_, out, loss), grads = ms.value_and_grad(objective, None, attn.trainable_params(), has_aux=True)(
        Tensor(x.reshape(shape)))
    grads = [g.asnumpy() for g in grads]
    return _OneProcess(attn, out.asnumpy().reshape(x.shape), d_out, float(loss.asnumpy()[0]), grads,
                       _terms(attn, layout, sizes, x, d_out, grads if dtype == ms.float32 else None))


def _terms(attn: mgo.nn.DSAttention, layout: str, sizes: object, x: np.ndarray, d_out: np.ndarray,
           grads: list[np.ndarray] | None) -> dict[str, float]:
    """The float64 oracle's gradient terms' magnitude of each parameter. The float32 gradients
    (``grads``, when given) must match the oracle's first, which shows it models this layer."""
    seq, pos = oracle.tokens(layout, sizes)
    selected = attn.select(Tensor(x.reshape((*sizes, -1) if layout == "BSND" else x.shape)),
                           list(sizes) if layout == "TND" else None).asnumpy().reshape(seq.size, -1)
    params = attn.trainable_params()
    cfg = {**worker.CFG, "rope_theta": 10000.0, "eps": 1e-6, "scale": attn.softmax_scale}
    case = ({p.name: p.asnumpy().astype(np.float64) for p in params}, x.astype(np.float64), seq, pos, selected, cfg,
            d_out.astype(np.float64))
    _, _, main, kl = oracle.gradient_terms(*case)
    terms = {name: main[name] + kl[name] for name in main}    # of the objective sum(out * d_out) + loss
    magnitudes = {name: oracle.term_magnitude(t) for name, t in terms.items()}
    for p, g in zip(params, grads or ()):
        err = rel_l2(g, terms[p.name].sum(0), magnitudes[p.name])
        assert err <= 1e-5, f"one process vs the float64 oracle: {p.name}: relative L2 {err:.3g}"
    return magnitudes


def _check(name: str, got: np.ndarray, want: np.ndarray, tol: float = 1e-6, terms: float = 0.0) -> None:
    err = rel_l2(got, want, terms)
    assert err <= tol, f"{name}: relative L2 {err:.3g} > {tol}"


# float32 CP = 2 runs over msrun below. bfloat16: the key-side gradients are rounded to bfloat16 per
# key segment by the kernels and then summed, against once in one process (seen: up to 1.2e-3).
@pytest.mark.parametrize(("layout", "sizes", "cp", "dtype", "tol"),
                         [("TND", [13, 16, 17, 39], 3, ms.float32, 1e-6), ("BSND", (2, 12), 3, ms.float32, 1e-6),
                          ("TND", [13, 16, 17, 39], 2, ms.bfloat16, 1e-2)])
def test_simulated_ranks_match_one_process(layout: str, sizes: object, cp: int, dtype: ms.dtype, tol: float) -> None:
    """The wrapper's two stages per rank, the all-gather replaced by a concatenation (so autodiff
    sums the ranks' key gradients): output, loss and every gradient within ``tol`` of one process."""
    attn, want_out, d_out, want_loss, want_grads, terms = _reference(layout, sizes, dtype=dtype)
    layer = mgo.nn.ContextParallelDSAttention(attn, 1)
    plans = [worker.plan_of(layout, sizes, cp, r) for r in range(cp)]
    x = worker.case_data(layout, sizes)[0]

    def objective() -> tuple[Tensor, list, list]:
        sides = [layer.local_side(Tensor(p.shard(x)), Tensor(p.positions)) for p in plans]
        everyone = msops.concat([s[-1] for s in sides], 0)
        total, outs, losses = 0, [], []
        for p, side in zip(plans, sides):
            out, loss = layer.attend(*side[:4], everyone, *(Tensor(a) for a in p.inputs()[1:]))
            total = total + (out * Tensor(p.shard(d_out))).sum() + loss.sum()
            outs.append(out)
            losses.append(loss)
        return total, outs, losses

    (_, outs, losses), grads = ms.value_and_grad(objective, None, attn.trainable_params(), has_aux=True)()
    outs = [o.asnumpy() for o in outs]
    for p, o in zip(plans, outs):
        assert not o[p.tokens < 0].any(), "padding rows must be zero"
    _check("out", unshard(plans, outs), want_out, tol)
    assert abs(sum(float(v.asnumpy()[0]) for v in losses) - want_loss) <= tol * abs(want_loss)
    for p, g, w in zip(attn.trainable_params(), grads, want_grads):
        _check(p.name, g.asnumpy(), w, tol, terms[p.name])


def test_parameter_names_and_errors() -> None:
    attn = mgo.nn.DSAttention(**worker.CFG, max_seq_len=32)
    names = [p.name for p in attn.trainable_params()]
    assert [p.name for p in mgo.nn.ContextParallelDSAttention(attn, 1).trainable_params()] == names
    holder = ms.nn.CellList([mgo.nn.ContextParallelDSAttention(attn, 1)])
    assert [p.name for p in holder.trainable_params()] == [f"0.{n}" for n in names]
    with pytest.raises(TypeError, match="must be a DSAttention"):
        mgo.nn.ContextParallelDSAttention(holder, 1)
    with pytest.raises(ValueError, match=r"argument 'cp_size' must be an int in \[1, 2147483647\], got 0"):
        mgo.nn.ContextParallelDSAttention(attn, 0)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    positions, lens_q, lens_k, key_map = (Tensor(a) for a in ContextParallelPlan([8], 1, 0).inputs())
    x = Tensor(np.zeros((8, worker.CFG["dim"]), np.float32))
    with pytest.raises(ValueError, match=r"positions must be \[8\] \(one per token of x"):
        mgo.nn.ContextParallelDSAttention(attn, 1)(x, positions[:7], lens_q, lens_k, key_map)


# -- two msrun workers ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, _Child]]]:
    """The 2-worker msrun job first and alone (see test_dsa_training), then the one-process
    training. Kills what is left at teardown and checks that no descendant survives."""
    work = tmp_path_factory.mktemp("context_parallel")
    msrun = _Child([str(Path(sys.executable).parent / "msrun"), "--worker_num=2", "--local_worker_num=2",
                    "--master_addr=127.0.0.1", f"--master_port={_free_port()}", "--join=True",
                    f"--log_dir={work / 'logs'}", str(Path(worker.__file__)), str(work), "--", *TRAIN, "--cp", "2",
                    "--save", str(work / "cp")], work, "msrun")
    children = {"msrun": msrun}
    try:
        msrun.result()
        children["one"] = _Child([sys.executable, str(SCRIPT), *TRAIN, "--save", str(work / "one")], work, "one")
        yield work, children
    finally:
        for child in children.values():
            child.kill()
        left = [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
        assert not left, f"processes left behind: {[(p.pid, p.cmdline()) for p in left]}"


@pytest.mark.parametrize("case", sorted(worker.CASES))
def test_collectives_match_one_process(runs: tuple[Path, dict], case: str) -> None:
    work, _ = runs
    layout, sizes = worker.CASES[case]
    ranks = [dict(np.load(work / f"{case}_rank{r}.npz")) for r in range(2)]
    assert all(bool(r["same_bits"]) for r in ranks), "a second run gave other bits"
    attn, want_out, _, want_loss, want_grads, terms = _reference(layout, sizes, ranks[0])
    plans = [worker.plan_of(layout, sizes, 2, r) for r in range(2)]
    for p, r in zip(plans, ranks):
        assert not r["out"].reshape(p.local_tokens, -1)[p.tokens < 0].any(), "padding rows must be zero"
    _check("out", unshard(plans, [r["out"] for r in ranks]), want_out)
    loss = sum(float(r["loss"][0]) for r in ranks)
    assert abs(loss - want_loss) <= 1e-6 * abs(want_loss), (loss, want_loss)
    for p, want in zip(attn.trainable_params(), want_grads):
        _check(p.name, ranks[0][f"grad:{p.name}"].astype(np.float64) + ranks[1][f"grad:{p.name}"], want,
               terms=terms[p.name])


def _losses(text: str, rank: int) -> list[tuple[float, float]]:
    found = re.findall(rf"\[rank {rank}/\d\] step +\d+  global task loss (\S+)  indexer KL (\S+)", text)
    return [(float(a), float(b)) for a, b in found]


def test_training_matches_one_process(runs: tuple[Path, dict]) -> None:
    work, children = runs
    one = children["one"].result()
    logs = "".join(p.read_text() for p in sorted((work / "logs").glob("worker_*.log")))
    want = _losses(one, 0)
    assert len(want) == 3, one[-2000:]
    for rank in range(2):
        got = _losses(logs, rank)
        assert len(got) == len(want), logs[-2000:]
        for step, (g, w) in enumerate(zip(got, want)):
            assert np.allclose(g, w, rtol=1e-6, atol=0), f"rank {rank} step {step + 1}: {g} vs one process {w}"
    cp = [np.load(work / "cp" / f"rank_{r}.npz") for r in range(2)]
    ref = np.load(work / "one" / "rank_0.npz")
    assert sorted(cp[0].files) == sorted(ref.files) and len(ref.files) > 10
    for name in ref.files:
        assert np.array_equal(cp[0][name], cp[1][name]), f"{name}: ranks differ"
        _check(name, cp[0][name], ref[name])
