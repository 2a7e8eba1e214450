"""Checks of a ``lightning_indexer`` top-k selection against float64 scores that hold on every CPU.

Two implementations that sum in different orders (the CPU kernel on AVX2 sgemm, AVX-512 sgemm or
oneDNN's bf16 matmul; the Ascend kernel's twin) may swap keys whose scores are closer than their
rounding errors, so their ordered selections are compared with the float64 reference, not with
each other: each must be the exact top-k of *some* scores within the error bound of a float32
evaluation (``_util.sum_error_bound``) of the reference scores. Where scores are further apart
than their bounds that is the exact ordered top-k; with bound 0 (exact arithmetic: small-integer
data) it is the exact ordered top-k with ties to the lower index.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from _util import sum_error_bound, sum_error_rms

from ms_grad_ops import reference as ref


@dataclass(frozen=True)
class Scores:
    """Per query row (TND order): the float64 score of each visible key (the visible keys of a row
    are keys ``0 .. visible - 1`` of its batch; NaN beyond), the sum of its terms' absolute values
    (``magnitude``) and the number of terms of its float32 evaluation; ``exact``: the data makes
    every float32 operation exact (small integers), so the bound is 0."""

    score: np.ndarray
    magnitude: np.ndarray
    n_terms: int
    visible: np.ndarray
    exact: bool = False

    @property
    def bound(self) -> np.ndarray:
        """Worst-case error of each score evaluated in float32 in any order (NaN where the score is)."""
        if self.exact:
            return np.where(np.isnan(self.magnitude), np.nan, 0.0)
        return sum_error_bound(self.n_terms, self.magnitude)

    def exactly(self) -> Scores:
        """The same scores, for data whose float32 arithmetic is exact (bound 0)."""
        return replace(self, exact=True)


def _all_keys(qi: np.ndarray, ki: np.ndarray, w: np.ndarray, lens: tuple, layout: str, sparse_mode: int,
              **cmp: object) -> tuple[np.ndarray, np.ndarray]:
    """The reference's ordered selection of every visible key, as [rows, n] indices and values."""
    n = ki.shape[0] if layout == "TND" else ki.shape[1]
    idx, val = ref.lightning_indexer(qi, ki, w, *lens, sparse_count=max(n, 1), layout=layout, sparse_mode=sparse_mode,
                                     **cmp)
    return idx.reshape(-1, idx.shape[-1]), val.reshape(-1, val.shape[-1])


def indexer_scores(query_index: np.ndarray, key_index: np.ndarray, weights: np.ndarray,
                   actual_seq_lengths_query: object = None, actual_seq_lengths_key: object = None, *,
                   layout: str, sparse_mode: int, cmp_ratio: int = 1, cmp_residual_k: object = None) -> Scores:
    """Scores ``I_j = sum_g w_g relu(q_g . k_j)`` of every visible key (the float64 reference) and
    the bound of their float32 evaluation: nested sums of Didx + Nidx + 1 terms (the q.k dot, the
    weight product, the head sum) over ``M_j = sum_g |w_g| sum_d |q_gd k_jd|``, which is the
    reference's score of the absolute values. Inputs as the reference takes them (float64 holding
    values exact in the kernel's dtype), lengths cumulative. Compressed keys (``cmp_ratio``,
    ``cmp_residual_k``): docs/contract.md section 9.1 (a row's visible keys are still a prefix)."""
    lens = () if layout == "BSND" else (actual_seq_lengths_query, actual_seq_lengths_key)
    cmp = {"cmp_ratio": cmp_ratio, "cmp_residual_k": cmp_residual_k}
    idx, val = _all_keys(query_index, key_index, weights, lens, layout, sparse_mode, **cmp)
    aidx, aval = _all_keys(np.abs(query_index), np.abs(key_index), np.abs(weights), lens, layout, sparse_mode, **cmp)
    rows, n = idx.shape
    score, mag = np.full((rows, n), np.nan), np.full((rows, n), np.nan)
    for r in range(rows):
        used, aused = idx[r] >= 0, aidx[r] >= 0
        score[r, idx[r][used]] = val[r][used]
        mag[r, aidx[r][aused]] = aval[r][aused]
    return Scores(score, mag, query_index.shape[-1] + query_index.shape[-2] + 1, (idx >= 0).sum(axis=1))


def assert_same_selection(idx: np.ndarray, val: np.ndarray, scores: Scores, what: str = "") -> None:
    """``idx``/``val`` (as the op returns them, ``[..., K]``) are the top-K of scores within the
    float32 error bounds of ``scores``: every row holds min(K, visible) distinct visible keys, then
    -1 / -inf; each value is within its key's worst-case bound of the float64 score (NaN exactly
    where that is NaN) and all values together within the root-sum-square bound
    (``_util.sum_error_rms``); the values descend (NaN last, equal values in ascending key order);
    and no key left out scores more than its bound above the last one selected (NaN keys after
    every number, in key order)."""
    k = idx.shape[-1]
    idx, val = idx.reshape(-1, k), np.asarray(val, np.float64).reshape(-1, k)
    assert idx.shape[0] == scores.score.shape[0], f"{what}: {idx.shape[0]} rows, reference {scores.score.shape[0]}"
    bound = scores.bound
    errors, magnitudes = [], []
    for r in range(idx.shape[0]):
        n = int(scores.visible[r])
        used = min(k, n)
        at = f"{what}: row {r}"
        assert (idx[r, used:] == -1).all() and np.isneginf(val[r, used:]).all(), f"{at}: unused slots -1 / -inf"
        sel, v = idx[r, :used], val[r, :used]
        assert ((sel >= 0) & (sel < n)).all() and len(set(sel.tolist())) == used, f"{at}: keys {sel} of {n} visible"
        s, b = scores.score[r, sel], bound[r, sel]
        nan = np.isnan(s)
        np.testing.assert_array_equal(np.isnan(v), nan, err_msg=f"{at}: NaN values where the score is NaN")
        err = np.abs(v[~nan] - s[~nan])
        assert (err <= b[~nan]).all(), f"{at}: value error {err.max():.3g} above its bound {b[~nan][err.argmax()]:.3g}"
        errors.append(err)
        magnitudes.append(scores.magnitude[r, sel][~nan])
        rank = np.where(nan, -np.inf, v)
        assert (rank[1:] <= rank[:-1]).all(), f"{at}: values not in descending order"
        tied = rank[1:] == rank[:-1]
        assert (sel[1:][tied] > sel[:-1][tied]).all(), f"{at}: equal values not in ascending key order"
        if used == n:
            continue
        rest = np.setdiff1d(np.arange(n), sel)
        rs, rb = scores.score[r, rest], bound[r, rest]
        fin = ~np.isnan(rs)
        assert (rs[fin] - rb[fin] <= rank[-1]).all(), f"{at}: a key left out scores clearly above the last selected"
        exact_tie = fin & (rb == 0) & (rs == rank[-1])
        assert (rest[exact_tie] > sel[rank == rank[-1]].max()).all(), f"{at}: an exact tie left out a lower key"
        if nan.any():
            assert (rest[~fin] > sel[nan].max()).all(), f"{at}: NaN keys not taken in key order"
    if errors and not scores.exact:
        err, rms = np.linalg.norm(np.concatenate(errors)), sum_error_rms(scores.n_terms, np.concatenate(magnitudes))
        assert err <= rms, f"{what}: root-sum-square value error {err:.3g} above its bound {rms:.3g}"
