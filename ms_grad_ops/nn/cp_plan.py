"""Head-tail folding of packed sequences over context-parallel ranks (NumPy, host side).

``ContextParallelPlan`` says which tokens of a batch one rank holds and what its kernels need:
every sequence is cut into ``2 * cp_size`` contiguous chunks and rank ``r`` holds chunks ``r`` and
``2 * cp_size - 1 - r`` (an early and a late chunk, so every rank does about the same causal
work). A sequence whose length is not a multiple of ``2 * cp_size`` gets chunks whose sizes differ
by at most one (the first ``L % (2 * cp_size)`` chunks are one longer); a sequence shorter than
``2 * cp_size`` leaves some chunks empty. Ranks can then hold different token counts: every rank's
share is padded to the largest one with tokens that form one trailing query segment with no key,
so they see nothing, produce zeros and add nothing to any loss or gradient.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def chunk_bounds(length: int, chunks: int) -> np.ndarray:
    """Boundaries ``[chunks + 1]`` (int64) of ``chunks`` contiguous chunks of ``length`` tokens whose
    sizes differ by at most one (the first ``length % chunks`` are the longer ones)."""
    sizes = np.full(chunks, length // chunks, np.int64)
    sizes[:length % chunks] += 1
    return np.concatenate(([0], np.cumsum(sizes)))


def _per_sequence(actual_seq_lengths: Sequence[int]) -> np.ndarray:
    cum = np.asarray(actual_seq_lengths, dtype=np.int64).reshape(-1)
    if cum.size == 0 or (np.diff(np.concatenate(([0], cum))) < 0).any():
        raise ValueError("ContextParallelPlan: actual_seq_lengths must be non-empty, non-decreasing cumulative "
                         f"lengths, got {cum.tolist()}")
    return np.diff(np.concatenate(([0], cum)))


class ContextParallelPlan:
    """The share of rank ``rank`` among ``cp_size`` context-parallel ranks of a packed batch.

    ``actual_seq_lengths``: cumulative lengths of the packed sequences (CANN style, as
    ``DSAttention`` takes them: lengths ``[3, 5]`` are ``[3, 8]``). Attributes (NumPy):

    - ``tokens`` int64 ``[T_local]``: the packed global index of each local token (-1 = padding),
      ordered sequence by sequence, early chunk then late chunk, padding last;
    - ``positions`` int32 ``[T_local]``: each token's position in its own sequence (0 for padding),
      where rope is applied;
    - ``query_lengths`` / ``key_lengths`` int32 ``[2 * B + 1]``: cumulative TND lengths of the local
      query segments (early and late chunk of every sequence, then the padding) and of their key
      segments, the global prefix ``[0, end of chunk)`` of the sequence (an empty chunk and the
      padding get no keys). ``sparse_mode=3``'s right-down alignment over a prefix is global
      causality, and a key's index in its segment is its position in the sequence;
    - ``key_map`` int32 ``[key_lengths[-1]]``: where each key of those segments sits in the
      all-gathered buffer ``[cp_size * T_local]`` (rank-major, every rank's padded share).

    The last key length is the sum of the prefixes, not the local token count (a rewrite that
    forces it to the local count is wrong on every rank that holds more than one segment).

    ``pad_to``: pad every share to at least this many tokens (data parallel x context parallel on
    CPU gathers over the world group, whose ranks must all send the same count: the largest share
    of any replica).
    """

    def __init__(self, actual_seq_lengths: Sequence[int], cp_size: int, rank: int, pad_to: int = 0) -> None:
        if not isinstance(cp_size, int) or cp_size < 1 or not isinstance(rank, int) or not 0 <= rank < cp_size:
            raise ValueError(f"ContextParallelPlan: need an int cp_size >= 1 and 0 <= rank < cp_size, got cp_size "
                             f"{cp_size!r} and rank {rank!r}")
        self.cp_size, self.rank = cp_size, rank
        self.seq_lengths = _per_sequence(actual_seq_lengths)
        starts = np.concatenate(([0], np.cumsum(self.seq_lengths)))[:-1]
        bounds = [chunk_bounds(int(n), 2 * cp_size) for n in self.seq_lengths]
        shares = [self._share(bounds, starts, r) for r in range(cp_size)]
        self.local_tokens = max(pad_to, *(len(s) for s in shares))   # every rank's padded share
        where = np.empty(int(self.seq_lengths.sum()), np.int64)  # global token -> gathered slot
        for r, share in enumerate(shares):
            where[share] = r * self.local_tokens + np.arange(len(share))
        mine = shares[rank]
        pad = self.local_tokens - len(mine)
        self.tokens = np.concatenate((mine, np.full(pad, -1, np.int64)))
        owner = np.searchsorted(np.cumsum(self.seq_lengths), mine, side="right")
        self.positions = np.concatenate((mine - starts[owner], np.zeros(pad, np.int64))).astype(np.int32)
        q_len, k_len, keys = [], [], []
        for b, bnd in enumerate(bounds):
            for c in self.chunks(rank):
                size = int(bnd[c + 1] - bnd[c])
                prefix = int(bnd[c + 1]) if size else 0
                q_len.append(size)
                k_len.append(prefix)
                keys.append(where[starts[b] + np.arange(prefix)])
        q_len.append(pad)
        k_len.append(0)
        self.query_lengths = np.cumsum(q_len).astype(np.int32)
        self.key_lengths = np.cumsum(k_len).astype(np.int32)
        self.key_map = np.concatenate(keys).astype(np.int32)

    def chunks(self, rank: int) -> tuple[int, int]:
        """The two chunk numbers of ``rank``: early ``rank``, late ``2 * cp_size - 1 - rank``."""
        return rank, 2 * self.cp_size - 1 - rank

    def _share(self, bounds: list[np.ndarray], starts: np.ndarray, rank: int) -> np.ndarray:
        """Packed global indices of the tokens ``rank`` holds, in its local order (unpadded)."""
        parts = [starts[b] + np.arange(bnd[c], bnd[c + 1]) for b, bnd in enumerate(bounds)
                 for c in self.chunks(rank)]
        return np.concatenate(parts).astype(np.int64)

    @classmethod
    def bsnd(cls, batch: int, seq_len: int, cp_size: int, rank: int) -> ContextParallelPlan:
        """The plan of a BSND batch ``[batch, seq_len]``: every rank holds ``[batch, seq_len // cp_size]``
        (its two chunks of every row, in that order). ``seq_len`` must be a multiple of
        ``2 * cp_size`` (use TND for other lengths)."""
        if batch < 1 or seq_len < 1 or seq_len % (2 * cp_size):
            raise ValueError(f"ContextParallelPlan: BSND needs batch >= 1 and seq_len a multiple of 2 * cp_size = "
                             f"{2 * cp_size}, got batch {batch}, seq_len {seq_len} (pack uneven sequences as TND)")
        return cls(np.arange(1, batch + 1) * seq_len, cp_size, rank)

    def shard(self, array: np.ndarray, fill: float = 0) -> np.ndarray:
        """This rank's rows ``[T_local, ...]`` of a packed global ``array [T, ...]`` (padding rows = ``fill``)."""
        array = np.asarray(array)
        out = np.full((self.local_tokens,) + array.shape[1:], fill, array.dtype)
        real = self.tokens >= 0
        out[real] = array[self.tokens[real]]
        return out

    def inputs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(positions, query_lengths, key_lengths, key_map)``: the arguments that follow ``x`` in
        ``ContextParallelDSAttention.construct`` (wrap them in int32 Tensors)."""
        return self.positions, self.query_lengths, self.key_lengths, self.key_map


def unshard(plans: Sequence[ContextParallelPlan], arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Inverse of ``shard`` over all ranks: the packed global array ``[T, ...]`` from every rank's
    local rows (``[T_local, ...]``, or ``[B, S // cp_size, ...]`` of a BSND plan)."""
    total = int(plans[0].seq_lengths.sum())
    out = None
    for plan, array in zip(plans, arrays):
        array = np.asarray(array)
        lead = 1 if array.shape[0] == plan.local_tokens else 2
        rows = array.reshape((plan.local_tokens,) + array.shape[lead:])
        if out is None:
            out = np.zeros((total,) + rows.shape[1:], rows.dtype)
        real = plan.tokens >= 0
        out[plan.tokens[real]] = rows[real]
    return out
