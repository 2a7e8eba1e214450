"""The MindSpore baseline of scripts/bench/lightning_indexer_grad.py computes the benchmarked math: its
autodiff gradients against the float64 reference of lightning_indexer_grad, on the benchmark's own
causal selection (with -1 slots, S2 > S1) at a small size, and that selection is what the FLOP count
assumes (distinct visible keys, min(K, visible) of them per row)."""
from __future__ import annotations

import argparse
import importlib
import sys

import numpy as np
from _paths import SCRIPTS

from ms_grad_ops import reference as ref

sys.path.insert(0, str(SCRIPTS / "bench"))  # the bench scripts import ``common`` by that name
bench = importlib.import_module("lightning_indexer_grad")

SIZES = argparse.Namespace(s1=40, s2=48, k=16, nidx=4, didx=16)


def test_selection_matches_the_flop_count() -> None:
    x = bench.make_inputs(SIZES, np.random.default_rng(1))
    idx = x["sparse_indices"][0, :, 0]
    for row, lim, n in zip(idx, bench.visible(SIZES), bench.selected(SIZES)):
        chosen = row[row >= 0]
        assert len(chosen) == n == len(set(chosen.tolist())) and chosen.max() < lim


def test_composite_gradients_match_the_reference() -> None:
    x = bench.make_inputs(SIZES, np.random.default_rng(1))
    step, args = bench.composite_step(x)
    _, grads = step(*args)
    want = ref.lightning_indexer_grad(x["query_index"], x["key_index"], x["weights"], x["sparse_indices"],
                                      x["d_values"])
    for got, w in zip(grads, want):
        w = w[0]   # the composite works without B
        assert got.shape == w.shape
        assert np.linalg.norm(got.asnumpy() - w) <= 1e-5 * np.linalg.norm(w)
