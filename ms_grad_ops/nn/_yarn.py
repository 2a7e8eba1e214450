"""Rope frequencies with YaRN context extension, and the softmax-scale factor that goes with it, as
DeepSeek-V3/V3.2's ``inference/model.py`` defines them (``precompute_freqs_cis`` and ``MLA.__init__``).

YaRN applies only when ``max_seq_len > original_seq_len``. Pair i of a ``rope_dim``-wide rope part
turns ``r_i = L / (2 pi / theta_i)`` times over the original context ``L = original_seq_len``;
pairs that turn more than ``beta_fast`` times keep their frequency ``theta_i = rope_theta**(-2i /
rope_dim)``, pairs that turn fewer than ``beta_slow`` times are divided by ``rope_factor``, and a
linear ramp over the pair index blends the two in between. The bounds of the ramp are the pair
indices where ``r_i`` equals ``beta_fast`` / ``beta_slow``, rounded outwards (floor / ceil) and
clamped to ``[0, rope_dim - 1]`` (DeepSeek's clamp, on the channel count, not the pair count).
"""
from __future__ import annotations

import math

import numpy as np

# DeepSeek's ModelArgs defaults (inference/model.py), the values of V3/V3.1/V3.2.
ORIGINAL_SEQ_LEN = 4096
ROPE_THETA = 10000.0
ROPE_FACTOR = 40.0
BETA_FAST = 32
BETA_SLOW = 1
MSCALE = 1.0


def _ramp_bound(turns: float, rope_dim: int, theta: float, original_seq_len: int) -> float:
    """The (fractional) pair index whose frequency turns ``turns`` times over ``original_seq_len``."""
    return rope_dim * math.log(original_seq_len / (turns * 2 * math.pi)) / (2 * math.log(theta))


def rope_frequencies(rope_dim: int, theta: float, max_seq_len: int, original_seq_len: int = ORIGINAL_SEQ_LEN,
                     rope_factor: float = ROPE_FACTOR, beta_fast: float = BETA_FAST,
                     beta_slow: float = BETA_SLOW) -> np.ndarray:
    """Angular frequency of each rope pair, float64 ``[rope_dim // 2]`` (YaRN-scaled when
    ``max_seq_len > original_seq_len``)."""
    freq = theta ** (-np.arange(0, rope_dim, 2, dtype=np.float64) / rope_dim)
    if max_seq_len <= original_seq_len:
        return freq
    low = max(math.floor(_ramp_bound(beta_fast, rope_dim, theta, original_seq_len)), 0)
    high = min(math.ceil(_ramp_bound(beta_slow, rope_dim, theta, original_seq_len)), rope_dim - 1)
    if low == high:
        high += 0.001                     # DeepSeek's guard against a zero-width ramp
    ramp = np.clip((np.arange(rope_dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    # ramp 0 (fast pairs) keeps the frequency, ramp 1 (slow pairs) divides it by rope_factor.
    return freq * (1.0 - ramp) + freq / rope_factor * ramp


def softmax_scale_factor(max_seq_len: int, original_seq_len: int = ORIGINAL_SEQ_LEN,
                         rope_factor: float = ROPE_FACTOR, mscale: float = MSCALE) -> float:
    """The factor on the attention's softmax scale: ``(0.1 * mscale * ln(rope_factor) + 1)**2`` with
    YaRN, else 1."""
    if max_seq_len <= original_seq_len:
        return 1.0
    m = 0.1 * mscale * math.log(rope_factor) + 1.0
    return m * m


def rope_tables(max_seq_len: int, rope_dim: int, theta: float, **yarn: float) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin float32 ``[max_seq_len, rope_dim // 2]``: angle ``pos * freq_i`` of pair i, computed in
    float64 (``yarn``: the keyword arguments of :func:`rope_frequencies` after ``max_seq_len``)."""
    ang = np.arange(max_seq_len, dtype=np.float64)[:, None] * rope_frequencies(rope_dim, theta, max_seq_len,
                                                                               **yarn)[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
