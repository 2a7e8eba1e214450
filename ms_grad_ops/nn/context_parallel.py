"""``nn.ContextParallelDSAttention``: ``DSAttention`` with its tokens sharded over context-parallel ranks."""
from __future__ import annotations

from collections.abc import Iterator

import mindspore as ms
from mindspore import Tensor, nn
from mindspore import ops as msops

from .._checks import size_argument
from ._amp import rewrite_leaf
from .ds_attention import DSAttention, SparseStage


class GatherTokens(nn.Cell):
    """All-gather of token rows over the ranks ``[first, first + size)`` of a communication group,
    rank-major: ``[T, W] -> [size * T, W]``.

    Backward: every rank's gradient of the gathered rows summed over the ranks, this rank's slice.
    That is a ReduceScatter; MindSpore's CPU collectives (MCCL) have none, so on CPU it is an
    AllReduce (sum) and a slice. MCCL's AllReduce adds the ranks' buffers in an order fixed by
    the ring of ranks (each receive names its sender) and copies the result to every rank, so the
    gradient has the same bits on every rank and every run. ``reduce_scatter=True`` (Ascend/HCCL)
    uses ReduceScatter instead: not run here.

    ``first``/``size`` select a block of the group: MCCL's AllGather takes only the world group, so
    with data parallel x context parallel on CPU every replica gathers over the world and keeps its
    block (the backward pads the other blocks with zeros before the AllReduce): ``group_size / size``
    times the traffic of a gather over the block alone.
    """

    def __init__(self, group: str, rank: int, group_size: int, first: int = 0, size: int | None = None,
                 reduce_scatter: bool = False) -> None:
        super().__init__()
        self.rank, self.group_size, self.first = rank, group_size, first
        self.size = group_size if size is None else size
        self.reduce_scatter = reduce_scatter
        self.all_gather = msops.AllGather(group)
        self.all_reduce = msops.AllReduce(msops.ReduceOp.SUM, group)
        self.scatter = msops.ReduceScatter(msops.ReduceOp.SUM, group)

    def construct(self, x: Tensor) -> Tensor:
        everyone = self.all_gather(x)
        if self.size == self.group_size:
            return everyone
        n = x.shape[0]
        return everyone[self.first * n:(self.first + self.size) * n]

    def bprop(self, x: Tensor, out: Tensor, dout: Tensor) -> tuple[Tensor]:
        n = x.shape[0]
        if self.size != self.group_size:
            before = msops.zeros((self.first * n, dout.shape[1]), dout.dtype)
            after = msops.zeros(((self.group_size - self.first - self.size) * n, dout.shape[1]), dout.dtype)
            dout = msops.concat((before, dout, after), 0)
        if self.reduce_scatter:
            return (self.scatter(dout),)
        return (self.all_reduce(dout)[self.rank * n:(self.rank + 1) * n],)


@rewrite_leaf
class ContextParallelDSAttention(nn.Cell):
    """``DSAttention`` over ``cp_size`` ranks, each holding a share of every sequence's tokens.

    ``construct(x, positions, actual_seq_lengths_query, actual_seq_lengths_key, key_map) ->
    (out, indexer_loss)``, the four int32 tensors from ``ContextParallelPlan.inputs()`` of this rank.

    ``x``: this rank's tokens, float32 ``[T_local, dim]`` (``plan.shard`` of the packed batch, any
    ``attn.layout``) or ``[B, S // cp_size, dim]`` for a BSND plan (``ContextParallelPlan.bsnd``;
    ``plan.shard`` of the flattened batch, reshaped). ``out`` is shaped like ``x`` (padding rows are
    zero); ``indexer_loss`` float32 ``[1]`` is the KL loss summed over this rank's query tokens: the
    sum over ranks is the one-process loss.

    Scheme (head-tail folding, see ``ContextParallelPlan``): every rank projects only its own tokens
    (queries, key latent, rope at the tokens' global positions, indexer inputs); the key side of
    the attention, latent ``kv_lora_rank`` + key rope ``qk_rope_head_dim`` + indexer key
    ``index_head_dim`` float32 values per token, is all-gathered in one collective
    (``GatherTokens``); then the indexer, the sparse attention and the KL loss run locally over TND
    segments: each local chunk is a query segment whose key segment is its sequence's global
    prefix ``[0, end of chunk)`` (``sparse_mode=3`` aligns the queries right-down on it, so every
    query sees exactly the keys at or before its global position, and the top-k indices are
    positions in the sequence). Queries, indices and softmax statistics stay local.

    Parameters are ``attn``'s (same names: this Cell adds no prefix). Their gradients on one rank
    are that rank's share: train with the sum over the context-parallel ranks (AllReduce).
    ``group``: the communication group of the ``cp_size`` ranks; None (default): the block of
    ``cp_size`` consecutive world ranks that holds this rank (the whole world when it has
    ``cp_size`` ranks), gathered over the world group (MCCL on CPU has collectives over the world
    group only; see ``GatherTokens``). ``cp_size=1`` runs without collectives.
    """

    def __init__(self, attn: DSAttention, cp_size: int, group: str | None = None) -> None:
        super().__init__(auto_prefix=False)     # attn's parameter names stay attn's (see cells_and_names)
        if not isinstance(attn, DSAttention):
            raise TypeError(f"ContextParallelDSAttention: attn must be a DSAttention, got {type(attn).__name__}")
        cp_size = size_argument("ContextParallelDSAttention", "cp_size", cp_size)
        self.attn, self.cp_size = attn, cp_size
        self.rank = 0
        self.gather = None
        if cp_size > 1:
            from mindspore.communication import GlobalComm, get_group_size, get_rank
            on_ascend = ms.get_context("device_target") == "Ascend"
            if group is None:               # the block of cp_size consecutive world ranks holding this one
                world, rank = get_group_size(), get_rank()
                if world % cp_size:
                    raise ValueError(f"ContextParallelDSAttention: cp_size {cp_size} does not divide the "
                                     f"{world} ranks of the world group")
                first = rank // cp_size * cp_size
                self.rank = rank - first
                self.gather = GatherTokens(GlobalComm.WORLD_COMM_GROUP, rank, world, first, cp_size, on_ascend)
            else:
                if get_group_size(group) != cp_size:
                    raise ValueError(f"ContextParallelDSAttention: cp_size {cp_size} != the size "
                                     f"{get_group_size(group)} of group {group!r}")
                self.rank = get_rank(group)
                self.gather = GatherTokens(group, self.rank, cp_size, reduce_scatter=on_ascend)
        stage = attn.sparse
        self.sparse = SparseStage(stage.attention.attrs["scale_value"], stage.indexer.sparse_count, "TND", attn.dtype)

    def cells_and_names(self, cells: set | None = None, name_prefix: str = "") -> Iterator[tuple[str, nn.Cell]]:
        """As ``nn.Cell.cells_and_names``, with ``attn`` standing where this Cell stands: its
        parameters are named ``layer.wq_a.weight``, not ``layer.attn.wq_a.weight``, so parameters
        and checkpoints carry the same names with and without context parallelism."""
        seen = cells if cells else set()
        if self in seen:
            return
        seen.add(self)
        yield name_prefix, self
        yield from self.attn.cells_and_names(seen, name_prefix)
        for name, cell in self._cells.items():
            if cell is not None and cell is not self.attn:
                yield from cell.cells_and_names(seen, f"{name_prefix}.{name}" if name_prefix else name)

    def construct(self, x: Tensor, positions: Tensor, actual_seq_lengths_query: Tensor,
                  actual_seq_lengths_key: Tensor, key_map: Tensor) -> tuple[Tensor, Tensor]:
        lead = x.shape[:-1]
        q_lat, q_pe, q_idx, weights, mine = self.local_side(x, positions)
        everyone = mine if self.gather is None else self.gather(mine)
        out, loss = self.attend(q_lat, q_pe, q_idx, weights, everyone, actual_seq_lengths_query,
                                actual_seq_lengths_key, key_map)
        return out.reshape(lead + (out.shape[-1],)), loss

    def local_side(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """What this rank computes from its own tokens: the float32 queries ``q_lat [n, H, D]``,
        ``q_pe [n, H, Dr]``, the indexer's ``q_idx [n, Hidx, Didx]`` (kernel dtype) and ``weights
        [n, Hidx]``, and ``mine [n, D + Dr + Didx]`` float32, the key side that is all-gathered."""
        attn = self.attn
        flat = x.reshape(-1, x.shape[-1])
        n = flat.shape[0]
        if positions.shape != (n,):
            raise ValueError(f"ContextParallelDSAttention: positions must be [{n}] (one per token of x {x.shape}), "
                             f"got {positions.shape}")
        cos, sin = attn._tables_at(positions)
        qr, q_lat, q_pe, latent, k_pe = attn._project(flat, cos, sin)
        q_idx, k_idx, weights = attn._index_inputs(flat, qr, cos, sin, (n,))
        # One collective for the whole key side, in float32 (MCCL's AllReduce of the backward is
        # float32; a bfloat16/float16 indexer key converts exactly both ways).
        mine = msops.concat((latent.reshape(n, -1), k_pe.reshape(n, -1), k_idx.astype(ms.float32).reshape(n, -1)), 1)
        return q_lat, q_pe, q_idx, weights, mine

    def attend(self, q_lat: Tensor, q_pe: Tensor, q_idx: Tensor, weights: Tensor, everyone: Tensor,
               actual_seq_lengths_query: Tensor, actual_seq_lengths_key: Tensor, key_map: Tensor
               ) -> tuple[Tensor, Tensor]:
        """The local kernels over the gathered key side ``everyone [cp_size * n, D + Dr + Didx]``:
        ``(out [n, dim] float32, indexer_loss [1])``."""
        attn = self.attn
        d, r = attn.kv_rank, attn.rope_dim
        keys = msops.gather(everyone, key_map, 0)       # the key segments, duplicated prefixes included
        m = keys.shape[0]
        o, loss = self.sparse(q_lat, q_pe, keys[:, :d].reshape(m, 1, d), keys[:, d:d + r].reshape(m, 1, r), q_idx,
                              keys[:, d + r:].reshape(m, 1, -1).astype(attn.dtype), weights,
                              actual_seq_lengths_query, actual_seq_lengths_key, (q_lat.shape[0],), (m,), attn.attn_sink)
        return attn._output(o), loss
