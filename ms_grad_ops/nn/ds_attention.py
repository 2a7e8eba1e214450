"""``nn.DSAttention``: DeepSeek-V3.2 sparse attention (MLA + lightning indexer) from the package's Cells."""
from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn
from mindspore import ops as msops
from mindspore.common.initializer import Normal, initializer

from .._checks import check_batch_lengths, check_cumulative_values, lengths_input, size_argument
from .._specs import OP_SPECS
from . import _yarn, deepseek_io
from ._amp import KernelCell, rewrite_leaf
from .dense_stage import DenseStage, causal_indices
from .indexer_kl_loss import IndexerKLLoss
from .lightning_indexer import LightningIndexer
from .sparse_flash_attention import SparseFlashAttention


def _rope_interleaved(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """DeepSeek's rotary embedding (complex multiply of adjacent pairs) on the last axis of ``x``
    ``[N, H, Dr]`` float32; cos/sin ``[N, Dr // 2]`` gathered at each token's position."""
    n, h, dr = x.shape
    pairs = x.reshape(n, h, dr // 2, 2)
    x0, x1 = pairs[..., 0], pairs[..., 1]
    c, s = cos.expand_dims(1), sin.expand_dims(1)
    return msops.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).reshape(n, h, dr)


def _rope_half(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate-half rotary embedding (pair i = channels i and i + Dr/2) on the last axis of ``x``
    ``[N, H, Dr]`` float32, cos/sin ``[N, Dr // 2]``: DeepSeek's indexer rope (``interleaved=False``)."""
    half = x.shape[-1] // 2
    x0, x1 = x[..., :half], x[..., half:]
    c, s = cos.expand_dims(1), sin.expand_dims(1)
    return msops.concat((x0 * c - x1 * s, x0 * s + x1 * c), -1)


def _positions(t: int, lengths: Tensor) -> Tensor:
    """Position of every packed token inside its own sequence (TND, cumulative int lengths)."""
    lengths = lengths.astype(ms.int32)
    tokens = msops.arange(t).astype(ms.int32)
    seq = (tokens.reshape(-1, 1) >= lengths.reshape(1, -1)).astype(ms.int32).sum(1)
    starts = msops.concat((msops.zeros(1, ms.int32), lengths))
    return tokens - msops.gather(starts, seq, 0)


# What a max_seq_len error names (the layer's and check_batch's, one wording).
_PADDED_S = "the padded length S of x (layout BSND)"
_ALL_T = "one sequence of all T tokens of x (layout TND, no actual_seq_lengths)"
_LONGEST = "the longest sequence of actual_seq_lengths"


def _longest_sequence(lengths: object) -> object:
    """The longest sequence of cumulative lengths (TND, no leading 0): a scalar tensor for an int
    tensor (known when the graph runs), an int for a Python sequence or NumPy array."""
    if isinstance(lengths, Tensor):
        starts = msops.concat((msops.zeros(1, lengths.dtype), lengths[:-1]))
        return (lengths - starts).max()
    return int(np.diff(np.asarray(lengths, np.int64), prepend=0).max())


def _check_max_seq_len(length: object, max_seq_len: int, what: str) -> None:
    """``ValueError`` naming the layer, ``max_seq_len`` and ``length`` (``what`` says what it is) when
    a sequence is longer than the rope tables: an int (a static shape, or Python lengths) raises
    eagerly in PyNative and at compile time in GRAPH mode; a scalar tensor (tensor lengths, a dynamic
    dim) in PyNative when the layer runs and in GRAPH mode when the graph runs (MindSpore raises the
    same ValueError from the running graph, which then refuses later steps: docs/troubleshooting.md)."""
    if length > max_seq_len:
        raise ValueError(f"DSAttention: {what} has {length} tokens, more than max_seq_len = {max_seq_len} (the "
                         f"length of its rope tables; build the layer with a larger max_seq_len)")


class _RMSNorm(nn.Cell):
    """``x * rsqrt(mean(x^2) + eps) * weight`` over the last axis, float32."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = Parameter(initializer("ones", (dim,), ms.float32), name="weight")

    def construct(self, x: Tensor) -> Tensor:
        return x * msops.rsqrt((x * x).mean(-1, keep_dims=True) + self.eps) * self.weight


def _dense(n_in: int, n_out: int) -> nn.Dense:
    return nn.Dense(n_in, n_out, has_bias=False, weight_init=Normal(n_in ** -0.5))


@rewrite_leaf
class DSAttention(nn.Cell):
    """DeepSeek-V3.2 sparse attention: MLA whose keys are chosen by the lightning indexer.

    ``construct(x, actual_seq_lengths=None) -> (out, indexer_loss)``

    ``x``: float32 ``[B, S, dim]`` (layout "BSND") or ``[T, dim]`` (layout "TND": the tokens of
    all sequences packed). ``actual_seq_lengths`` (a Python list or an int32/int64 tensor, CANN's
    meaning, docs/contract.md section 0.3): TND, cumulative, lengths ``[3, 5]`` are written
    ``[3, 8]``, None = one sequence; BSND, one per batch, the valid tokens at the start of each
    padded batch row (None = all S): padding tokens get ``out`` 0, add nothing to the loss and get
    zero gradients. ``out`` is shaped like ``x``; ``indexer_loss`` float32 ``[1]`` is the indexer's
    KL loss summed over the query tokens (``IndexerKLLoss``). Train on ``task_loss(out) +
    indexer_loss``: each part reaches only its own parameters.

    Structure (DeepSeek-V3.2-Exp ``inference/model.py`` as of its "fix indexer rope" commit of
    2025-11-17, classes ``MLA`` and ``Indexer``):

    - query: ``qr = q_norm(wq_a(x))`` (RMSNorm), ``wq_b(qr)`` -> per head ``q_nope``
      (``qk_nope_head_dim``) and ``q_pe`` (``qk_rope_head_dim``, rotated);
    - key/value: ``wkv_a(x)`` -> latent ``kv`` (``kv_lora_rank``, RMSNorm ``kv_norm``) and one shared
      ``k_pe`` (rotated);
    - MLA in absorbed form: ``q_nope`` is multiplied by ``w_uk[h]`` (``[qk_nope_head_dim,
      kv_lora_rank]``), so the attention is MQA over the latent: query ``[.., n_heads,
      kv_lora_rank]`` + rope ``[.., n_heads, qk_rope_head_dim]``, one shared key = value ``kv`` +
      rope ``k_pe`` (``nn.SparseFlashAttention``, causal); its latent output goes through
      ``w_uv[h]`` (``[v_head_dim, kv_lora_rank]``) and ``wo``. ``w_uk``/``w_uv`` are DeepSeek's
      ``wkv_b`` viewed per head;
    - indexer on the *detached* ``x`` and ``qr``: ``q_idx = wq_idx(qr)`` (``index_n_heads x
      index_head_dim``), ``k_idx = k_norm(wk_idx(x))`` (LayerNorm, one head), rope on their first
      ``qk_rope_head_dim`` channels in the rotate-half layout (DeepSeek's indexer puts the rope
      part first, MLA last; MLA's rope is interleaved),
      ``weights = weights_proj(x) * index_n_heads**-0.5 * index_head_dim**-0.5``; top
      ``index_topk`` keys per query row (``nn.LightningIndexer``, causal);
    - ``indexer_loss = IndexerKLLoss(...)``: KL divergence between the head-averaged main
      attention over the selected keys and the indexer's softmax over them. The main-attention
      tensors enter it as constants and the indexer's inputs are detached, so the KL loss trains
      only the indexer and the task loss never reaches it.

    ``index_topk >= S`` makes the attention dense (every visible key is selected): that is the
    dense warm-up stage of DeepSeek-V3.2's training, where the indexer learns the dense attention.
    That stage runs on the dense pair (``dense_warmup``): the main attention over every causal key with
    its indices built directly (no indexer top-k), the indexer's statistics from
    ``dense_lightning_indexer_softmax_lse`` and the loss from ``nn.DenseIndexerKLLoss``, the same loss
    and gradients as the top-k path at K = S without the indexer's ``S x S`` values (docs/dsattention.md).

    Rope: MLA's q_pe/k_pe in DeepSeek's interleaved layout (adjacent channel pairs), the indexer's
    in the rotate-half layout (pair i = channels i and i + Dr/2), as DeepSeek's current code does.
    Their first V3.2-Exp release rotated the indexer interleaved too and this layer followed it;
    DeepSeek's 2025-11-17 fix (README: "the input tensor to RoPE in the indexer module requires a
    non-interleaved layout") says the checkpoint was trained rotate-half, so with its weights the
    interleaved indexer selects the wrong keys. Frequencies are YaRN-extended exactly as DeepSeek's
    ``precompute_freqs_cis`` when ``max_seq_len > original_seq_len`` (``_yarn``), and the softmax
    scale then carries DeepSeek's ``mscale**2`` factor. Tables are computed in float64, stored
    float32 (DeepSeek computes the angles in float32).

    Differences from DeepSeek's code, on purpose: rope is computed with MindSpore ops in float32,
    because the package's ``rope`` kernel is ATB's rotate-half on 128-wide heads with q and k of one
    shape (here the rope parts are ``qk_rope_head_dim`` wide, ``n_heads`` of them for q and one for
    k; this element-wise work is small beside the attention); no Hadamard rotation of the indexer's
    q/k (it exists for their FP8 quantisation; an orthogonal map of both leaves ``q . k``
    unchanged); no FP8 (weights and activations in float; ``load_deepseek_state_dict`` dequantises
    FP8 weights), no KV cache.

    Args (DeepSeek-V3.2 671B values in brackets):
        dim: model width [7168]. n_heads: attention heads [128]. q_lora_rank: [1536] (> 0).
        kv_lora_rank: latent width = the attention's D [512]. qk_nope_head_dim: [128].
        qk_rope_head_dim: the attention's Dr, even [64]. v_head_dim: [128].
        index_n_heads: [64]. index_head_dim: [128] (>= qk_rope_head_dim). index_topk: K [2048].
        max_seq_len: positions covered by the rope tables (>= the longest sequence) [DeepSeek's
            ModelArgs default 16384]; a longer sequence is a ``ValueError`` naming the layer,
            ``max_seq_len`` and its length (eagerly, at GRAPH compile, or from the running graph for
            tensor lengths and dynamic dims; ``check_batch`` checks a batch first:
            docs/troubleshooting.md). rope_theta: [10000].
        original_seq_len, rope_factor, beta_fast, beta_slow, mscale: YaRN, applied when
            ``max_seq_len > original_seq_len`` [DeepSeek's defaults 4096, 40, 32, 1, 1.0].
        softmax_scale: attention logit scale; None = ``(qk_nope_head_dim + qk_rope_head_dim)**-0.5``,
            times ``(0.1 * mscale * ln(rope_factor) + 1)**2`` with YaRN (DeepSeek's MLA); a value
            given is used as it is.
        layout: "BSND" or "TND". dtype: the dtype of the fused kernels' inputs (float32, float16
            or bfloat16); parameters, projections and norms stay float32 (MindSpore's CPU backend
            has no bfloat16 MatMul); under ``ms.amp`` O2/O3 the projections follow amp (float16)
            and the kernels keep ``dtype`` (docs/dsattention.md, "Mixed precision").
            eps: norm epsilon [1e-6]. Every size is an int in [1, 2**31 - 1] (``ValueError``).
        attn_sink: learn DeepSeek-V4's per-head sink logits, a float32 Parameter ``attn_sink
            [n_heads]`` (zero-initialised) that the sparse attention and the indexer's KL loss take
            as ``sinks`` (docs/contract.md section 0.7; a constant of the KL loss); loaded and saved
            under DeepSeek-V4's name ``attn_sink`` by ``load_deepseek_state_dict`` /
            ``deepseek_state_dict``.
        dense_warmup: the dense warm-up path (above): None (default) = when ``index_topk >=
            max_seq_len`` and no ``attn_sink`` (every key of every sequence the layer takes is
            selected; a static choice, so GRAPH mode and dynamic shapes keep one graph), True =
            always (the indexer trains on the dense attention whatever ``index_topk``), False = never
            (the top-k path, as before). The dense pair has no sinks (nor has CANN's):
            ``attn_sink=True`` with ``dense_warmup=True`` is a ``ValueError``.
    """

    def __init__(self, dim: int, n_heads: int, q_lora_rank: int, kv_lora_rank: int, qk_nope_head_dim: int,
                 qk_rope_head_dim: int, v_head_dim: int, index_n_heads: int, index_head_dim: int, index_topk: int,
                 *, max_seq_len: int, rope_theta: float = _yarn.ROPE_THETA, softmax_scale: float | None = None,
                 layout: str = "BSND", dtype: ms.dtype = ms.float32, eps: float = 1e-6,
                 original_seq_len: int = _yarn.ORIGINAL_SEQ_LEN, rope_factor: float = _yarn.ROPE_FACTOR,
                 beta_fast: float = _yarn.BETA_FAST, beta_slow: float = _yarn.BETA_SLOW,
                 mscale: float = _yarn.MSCALE, attn_sink: bool = False,
                 dense_warmup: bool | None = None) -> None:
        super().__init__()
        # The layout of every kernel it runs: the table's attribute (checked here before any is built).
        error = OP_SPECS["sparse_flash_attention"].attr("layout").error("DSAttention", layout)
        if error:
            raise ValueError(error)
        if dtype not in (ms.float32, ms.float16, ms.bfloat16):
            raise TypeError(f"DSAttention: dtype must be float32, float16 or bfloat16, got {dtype}")
        sizes = {"dim": dim, "n_heads": n_heads, "q_lora_rank": q_lora_rank, "kv_lora_rank": kv_lora_rank,
                 "qk_nope_head_dim": qk_nope_head_dim, "qk_rope_head_dim": qk_rope_head_dim, "v_head_dim": v_head_dim,
                 "index_n_heads": index_n_heads, "index_head_dim": index_head_dim, "index_topk": index_topk,
                 "max_seq_len": max_seq_len, "original_seq_len": original_seq_len}
        for name, value in sizes.items():
            size_argument("DSAttention", name, value)
        if qk_rope_head_dim % 2 or index_head_dim < qk_rope_head_dim:
            raise ValueError(f"DSAttention: qk_rope_head_dim ({qk_rope_head_dim}) must be even and positive and "
                             f"<= index_head_dim ({index_head_dim})")
        if max_seq_len > original_seq_len and min(original_seq_len, rope_factor, beta_fast, beta_slow) <= 0:
            raise ValueError(f"DSAttention: YaRN (max_seq_len {max_seq_len} > original_seq_len {original_seq_len}) "
                             f"needs positive original_seq_len, rope_factor ({rope_factor}), beta_fast "
                             f"({beta_fast}) and beta_slow ({beta_slow})")
        self.layout, self.dtype = layout, dtype
        self.n_heads, self.rope_dim = n_heads, qk_rope_head_dim
        self.nope_dim, self.kv_rank, self.v_dim = qk_nope_head_dim, kv_lora_rank, v_head_dim
        self.index_heads, self.index_dim = index_n_heads, index_head_dim
        if softmax_scale is None:
            scale = (qk_nope_head_dim + qk_rope_head_dim) ** -0.5 * _yarn.softmax_scale_factor(
                max_seq_len, original_seq_len, rope_factor, mscale)
        else:
            scale = float(softmax_scale)
        self.softmax_scale = scale

        self.wq_a = _dense(dim, q_lora_rank)
        self.q_norm = _RMSNorm(q_lora_rank, eps)
        self.wq_b = _dense(q_lora_rank, n_heads * (qk_nope_head_dim + qk_rope_head_dim))
        self.wkv_a = _dense(dim, kv_lora_rank + qk_rope_head_dim)
        self.kv_norm = _RMSNorm(kv_lora_rank, eps)
        self.w_uk = Parameter(initializer(Normal(qk_nope_head_dim ** -0.5), (n_heads, qk_nope_head_dim,
                                                                             kv_lora_rank)), name="w_uk")
        self.w_uv = Parameter(initializer(Normal(kv_lora_rank ** -0.5), (n_heads, v_head_dim, kv_lora_rank)),
                              name="w_uv")
        self.wo = _dense(n_heads * v_head_dim, dim)

        self.wq_idx = _dense(q_lora_rank, index_n_heads * index_head_dim)
        self.wk_idx = _dense(dim, index_head_dim)
        self.k_norm = nn.LayerNorm((index_head_dim,), epsilon=eps)
        self.weights_proj = _dense(dim, index_n_heads)
        self.weights_scale = index_n_heads ** -0.5 * index_head_dim ** -0.5

        yarn = {"original_seq_len": original_seq_len, "rope_factor": rope_factor, "beta_fast": beta_fast,
                "beta_slow": beta_slow}
        cos, sin = _yarn.rope_tables(max_seq_len, qk_rope_head_dim, rope_theta, **yarn)
        self.cos, self.sin = Tensor(cos), Tensor(sin)
        self.sparse = SparseStage(scale, index_topk, layout, dtype)
        if not isinstance(attn_sink, bool):
            raise TypeError(f"DSAttention: argument 'attn_sink' must be a bool, got {type(attn_sink).__name__}")
        self.attn_sink = Parameter(initializer("zeros", (n_heads,), ms.float32), name="attn_sink") if attn_sink \
            else None
        if dense_warmup is not None and not isinstance(dense_warmup, bool):
            raise TypeError(f"DSAttention: dense_warmup must be None, True or False, got {dense_warmup!r}")
        if attn_sink and dense_warmup:
            raise ValueError("DSAttention: attn_sink=True needs the top-k path: the dense pair "
                             "(dense_lightning_indexer_*) takes no sinks, as CANN's; pass dense_warmup=False or None")
        self.dense_warmup = (index_topk >= max_seq_len and not attn_sink) if dense_warmup is None else dense_warmup
        self.max_seq_len = max_seq_len
        self.dense = DenseStage(scale, layout, dtype)

    # -- DeepSeek checkpoints --------------------------------------------------------------------

    # No return annotation: it would name the class, and ``ms.amp.auto_mixed_precision`` (O1) re-emits
    # the class source under another name (``mindspore.rewrite``), where that annotation is a NameError.
    @classmethod
    def from_deepseek(cls, args: object, **kwargs: object):  # returns a DSAttention
        """The layer for DeepSeek's ``ModelArgs`` ``args``: a dict, a path to their ``config.json`` (as
        ``inference/generate.py`` reads it) or an object with those attributes; missing names take
        ModelArgs' defaults (e.g. ``max_seq_len`` 16384, so YaRN is on), unknown names are an error.
        ``kwargs``: further constructor arguments (``layout``, ``dtype``, ``eps``, ``softmax_scale``),
        or overrides of those ModelArgs give (e.g. ``max_seq_len``)."""
        return cls(**{**deepseek_io.layer_kwargs(args), **kwargs})

    # No return annotation: a class-named one breaks amp.auto_mixed_precision "O1", which re-emits this
    # source through mindspore.rewrite (issue 26). It returns a DSAttention (an instance of cls).
    @classmethod
    def from_pretrained(cls, path: str, layer: int, **kwargs: object):
        """Layer ``layer``'s attention from DeepSeek-V3.2's Hugging Face release in the folder ``path``
        (``config.json`` with ``"model_type": "deepseek_v32"``, ``model.safetensors.index.json`` and
        its shards): the config's Hugging Face keys become the constructor arguments (YaRN from
        ``rope_scaling``; ``max_seq_len`` is DeepSeek's ``ModelArgs`` default 16384, as their inference
        runs the release: ``max_position_embeddings`` is not read), and only the shards holding
        ``model.layers.{layer}.self_attn.*`` are opened, only those tensors read (FP8 with
        ``weight_scale_inv``, bfloat16, float16, float32). ``kwargs``: further constructor arguments
        (``layout``, ``dtype``, ``max_seq_len``, ...). A missing layer or tensor, an unexpected or
        wrongly shaped tensor, or a config that is not DeepSeek-V3.2's raises a ``ValueError`` naming
        it and its file. docs/dsattention.md has the mapping."""
        return deepseek_io.from_pretrained(cls, path, layer, kwargs)

    def load_deepseek_state_dict(self, state: object, prefix: str = "") -> None:
        """Sets the parameters from one layer's tensors under the names of DeepSeek's ``MLA`` module
        (``wq_a.weight``, ``q_norm.weight``, ``wq_b.weight``, ``wkv_a.weight``, ``kv_norm.weight``,
        ``wkv_b.weight``, ``wo.weight``, ``indexer.wq_b.weight``, ``indexer.wk.weight``,
        ``indexer.k_norm.weight``, ``indexer.k_norm.bias``, ``indexer.weights_proj.weight``, each
        after ``prefix``, e.g. ``"layers.3.attn."``) or of the Hugging Face release (``q_a_proj``,
        ``q_a_layernorm``, ``q_b_proj``, ``kv_a_proj_with_mqa``, ``kv_a_layernorm``, ``kv_b_proj``,
        ``o_proj``, the same ``indexer.*``; ``prefix`` e.g. ``"model.layers.3.self_attn."``): a
        mapping of NumPy arrays, the path of a safetensors file or of a release folder (through its
        index; only the tensors under ``prefix`` are read). ``wkv_b`` ``[H * (nope + v),
        kv_lora_rank]`` is split per head into ``w_uk`` and ``w_uv``. float8_e4m3fn weights are
        dequantised with their ``.scale`` / ``.weight_scale_inv`` (``weight * scale`` per 128 x 128
        block); bfloat16 and float16 are widened exactly. A missing, unexpected or wrongly shaped
        tensor raises a ``ValueError`` listing them all."""
        deepseek_io.load(self, state, prefix)

    def deepseek_state_dict(self, prefix: str = "") -> dict:
        """The parameters as float32 NumPy arrays under DeepSeek's names (``prefix`` prepended): the
        inverse of ``load_deepseek_state_dict``, bitwise."""
        return deepseek_io.state_dict(self, prefix)

    def check_batch(self, x_shape: tuple[int, ...] | Tensor, actual_seq_lengths: object = None) -> None:
        """Host-side pre-flight of a batch (``ms_grad_ops.preflight``, docs/troubleshooting.md): the
        ``ValueError`` the layer or its kernels would give on ``x`` (a tensor or its shape) and
        ``actual_seq_lengths`` (a list, NumPy array or int tensor), raised before any graph runs: the
        lengths rule as the kernels read it (their message), then every sequence against
        ``max_seq_len``. In GRAPH mode a bad batch found inside the graph leaves it refusing later
        steps; a loop that calls this first can skip the batch and train on."""
        from .. import preflight
        shape = tuple(x_shape.shape if isinstance(x_shape, Tensor) else x_shape)
        if self.layout == "BSND":
            preflight.check_lengths(actual_seq_lengths, actual_seq_lengths, query_tokens=shape[:2],
                                    key_tokens=shape[1], layout="BSND")
            _check_max_seq_len(shape[1], self.max_seq_len, _PADDED_S)
        elif actual_seq_lengths is None:
            _check_max_seq_len(shape[0], self.max_seq_len, _ALL_T)
        else:
            preflight.check_lengths(actual_seq_lengths, actual_seq_lengths, query_tokens=shape[0], key_tokens=shape[0],
                                    layout="TND")
            lens = actual_seq_lengths.asnumpy() if isinstance(actual_seq_lengths, Tensor) else actual_seq_lengths
            _check_max_seq_len(_longest_sequence(lens), self.max_seq_len, _LONGEST)

    # -- helpers -------------------------------------------------------------------------------

    def _lengths(self, x: Tensor, actual_seq_lengths: object) -> Tensor | None:
        """The lengths as an int tensor (cumulative in TND, per batch in BSND), or None; the values
        of Python lengths checked against ``x`` here, and every sequence against ``max_seq_len``
        (``_check_max_seq_len``). A tensor is passed on unchanged: an int64 one reaches the kernels
        as int64, which check its values (a cast to int32 would wrap an invalid 2**32 + 2 into a valid 2)."""
        op, arg = "DSAttention", "actual_seq_lengths"
        if self.layout == "BSND":
            check_batch_lengths(op, arg, actual_seq_lengths, x.shape[1])
            lengths = None if actual_seq_lengths is None else lengths_input(op, arg, actual_seq_lengths)
            # the rope tables are read for every padded row: the padded length S must fit
            _check_max_seq_len(x.shape[1], self.max_seq_len, _PADDED_S)
            return lengths
        if actual_seq_lengths is None:
            _check_max_seq_len(x.shape[0], self.max_seq_len, _ALL_T)
            return None
        check_cumulative_values(op, arg, actual_seq_lengths, x.shape[0])
        _check_max_seq_len(_longest_sequence(actual_seq_lengths), self.max_seq_len, _LONGEST)
        return lengths_input(op, arg, actual_seq_lengths)

    def _tables_at(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos/sin float32 ``[N, Dr // 2]`` at the int ``positions [N]`` (each token's position in its
        sequence); both ropes (MLA's interleaved, the indexer's rotate-half) read these tables."""
        return msops.gather(self.cos, positions, 0), msops.gather(self.sin, positions, 0)

    def _tables(self, x: Tensor, lengths: Tensor | None) -> tuple[Tensor, Tensor]:
        """cos/sin ``[N, Dr // 2]`` for the N = B*S (or T) tokens of ``x``."""
        if self.layout == "BSND":
            b, s = x.shape[0], x.shape[1]
            cos, sin = self.cos[:s], self.sin[:s]
            return msops.tile(cos, (b, 1)), msops.tile(sin, (b, 1))
        if lengths is None:
            return self.cos[:x.shape[0]], self.sin[:x.shape[0]]
        return self._tables_at(_positions(x.shape[0], lengths))

    def _shape(self, t: Tensor, lead: tuple) -> Tensor:
        """``[N, H, D]`` -> ``[B, S, H, D]`` (BSND) or unchanged (TND), in the kernels' dtype."""
        return t.reshape(lead + t.shape[1:]).astype(self.dtype)

    def _index_inputs(self, x: Tensor, qr: Tensor, cos: Tensor, sin: Tensor, lead: tuple
                      ) -> tuple[Tensor, Tensor, Tensor]:
        """The lightning indexer's ``(query_index, key_index, weights)`` from flat ``x [N, dim]`` and
        ``qr [N, q_lora_rank]`` (both detached here), in the kernels' layout and dtype (weights float32)."""
        x, qr = msops.stop_gradient(x), msops.stop_gradient(qr)
        n, r = x.shape[0], self.rope_dim
        q = self.wq_idx(qr).reshape(n, self.index_heads, self.index_dim)
        q = msops.concat((_rope_half(q[..., :r], cos, sin), q[..., r:]), -1)
        k = self.k_norm(self.wk_idx(x)).reshape(n, 1, self.index_dim)
        k = msops.concat((_rope_half(k[..., :r], cos, sin), k[..., r:]), -1)
        w = (self.weights_proj(x) * self.weights_scale).reshape(lead + (self.index_heads,))
        # float32 (the indexer takes it beside any dtype) whatever dtype amp computed it in; the cast
        # comes last, since in PyNative amp O2/O3 casts the inputs of every operator of this Cell.
        return self._shape(q, lead), self._shape(k, lead), w.astype(ms.float32)

    def index_inputs(self, x: Tensor, actual_seq_lengths: object = None) -> tuple[Tensor, Tensor, Tensor]:
        """``(query_index, key_index, weights)`` as fed to the indexer (for ``nn.LightningIndexer``
        with another ``sparse_count``, e.g. to measure what a sparser top-k would select)."""
        lengths = self._lengths(x, actual_seq_lengths)
        flat = x.reshape(-1, x.shape[-1])
        cos, sin = self._tables(x, lengths)
        return self._index_inputs(flat, self.q_norm(self.wq_a(flat)), cos, sin, x.shape[:-1])

    def select(self, x: Tensor, actual_seq_lengths: object = None) -> Tensor:
        """The int32 key indices the forward attends to: ``[B, S, 1, index_topk]`` / ``[T, 1, index_topk]``,
        local to each sequence, -1 in unused slots; with ``dense_warmup`` every causal key in order,
        ``[B, S, 1, S]`` / ``[T, 1, min(T, max_seq_len)]``."""
        lengths = self._lengths(x, actual_seq_lengths)
        if self.dense_warmup:
            return self._dense_geometry(x, lengths)[0]
        q_idx, k_idx, weights = self.index_inputs(x, actual_seq_lengths)
        return self.sparse.indexer(q_idx, k_idx, weights, lengths, lengths)[0]

    def _dense_geometry(self, x: Tensor, lengths: Tensor | None) -> tuple[Tensor, Tensor, int]:
        """(causal indices, positions int32 [N], width) of the dense warm-up for the tokens of ``x``: width S
        (BSND), or min(T, max_seq_len) in TND (no sequence is longer: the rope tables end there)."""
        if self.layout == "BSND":
            b, s = x.shape[0], x.shape[1]
            positions, width = msops.tile(msops.arange(s).astype(ms.int32), (b,)), s
        else:
            t = x.shape[0]
            positions = msops.arange(t).astype(ms.int32) if lengths is None else _positions(t, lengths)
            width = min(t, self.max_seq_len)
        return causal_indices(positions, x.shape[:-1], width), positions, width

    @property
    def indexer(self) -> LightningIndexer:
        """The top-``index_topk`` selection Cell (held by ``self.sparse``)."""
        return self.sparse.indexer

    # -- stages (shared with nn.ContextParallelDSAttention) -------------------------------------

    def _project(self, flat: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """``(qr, q_lat, q_pe, latent, k_pe)`` float32 for the tokens ``flat [N, dim]``, rope tables
        ``[N, Dr // 2]``: the query latent ``[N, q_lora_rank]``, the absorbed query ``[N, H, D]`` and
        its rope ``[N, H, Dr]``, the key latent ``[N, 1, D]`` and its rope ``[N, 1, Dr]``."""
        n, h = flat.shape[0], self.n_heads
        qr = self.q_norm(self.wq_a(flat))
        q = self.wq_b(qr).reshape(n, h, self.nope_dim + self.rope_dim)
        q_nope, q_pe = q[..., :self.nope_dim], _rope_interleaved(q[..., self.nope_dim:], cos, sin)
        # w_uk/w_uv take the activations' dtype: under amp O2/O3 the Dense layers hand on float16
        q_lat = msops.bmm(q_nope.transpose(1, 0, 2), self.w_uk.astype(q_nope.dtype)).transpose(1, 0, 2)
        kv = self.wkv_a(flat)
        latent = self.kv_norm(kv[:, :self.kv_rank]).reshape(n, 1, self.kv_rank)
        k_pe = _rope_interleaved(kv[:, self.kv_rank:].reshape(n, 1, self.rope_dim), cos, sin)
        return qr, q_lat, q_pe, latent, k_pe

    def _output(self, o: Tensor) -> Tensor:
        """The attention's latent output ``[..., H, D]`` in the kernels' dtype (BSND or TND) -> ``[N, dim]``
        float32. Cast before the reshape: GRAPH mode and ``ms.jit`` have no CPU Reshape for bfloat16."""
        h = self.n_heads
        o = o.astype(ms.float32).reshape(-1, h, self.kv_rank)
        n = o.shape[0]
        v = msops.bmm(o.transpose(1, 0, 2), self.w_uv.astype(o.dtype).transpose(0, 2, 1)).transpose(1, 0, 2)
        return self.wo(v.reshape(n, h * self.v_dim))

    # -- forward -------------------------------------------------------------------------------

    def construct(self, x: Tensor, actual_seq_lengths: object = None) -> tuple[Tensor, Tensor]:
        lengths = self._lengths(x, actual_seq_lengths)
        lead = x.shape[:-1]
        flat = x.reshape(-1, x.shape[-1])
        cos, sin = self._tables(x, lengths)
        qr, q_lat, q_pe, latent, k_pe = self._project(flat, cos, sin)
        q_idx, k_idx, weights = self._index_inputs(flat, qr, cos, sin, lead)
        if self.dense_warmup:
            _, positions, width = self._dense_geometry(x, lengths)
            o, loss, _ = self.dense(q_lat, q_pe, latent, k_pe, q_idx, k_idx, weights, lengths, positions, lead, width)
        else:
            o, loss = self.sparse(q_lat, q_pe, latent, k_pe, q_idx, k_idx, weights, lengths, lengths, lead, lead,
                                  self.attn_sink)
        out = self._output(o)
        return out.reshape(lead + (out.shape[-1],)), loss


class SparseStage(KernelCell):
    """The kernels of ``DSAttention`` in one layout: the lightning indexer's top-k, the sparse MLA
    attention and the indexer's KL loss (shared with ``ContextParallelDSAttention``, which runs them
    over TND segments of its local queries and the gathered keys).

    ``construct(q_lat, q_pe, latent, k_pe, q_idx, k_idx, weights, lengths_q, lengths_k, lead_q, lead_k,
    sinks=None) -> (o, indexer_loss)``: the float32 ``[Nq, H, D]``/``[Nq, H, Dr]`` queries and ``[Nk, 1, D]``/
    ``[Nk, 1, Dr]`` keys are reshaped to ``lead_q``/``lead_k`` (``(B, S)`` or ``(T,)``) and cast to
    ``dtype``; the indexer inputs come in that layout already (and are cast to ``dtype``, weights to
    float32, here too: under amp O2/O3 the calling layer may hand them on in float16). ``sinks``
    (float32 ``[H]`` or None) go to the attention and, as a constant, to the KL loss. ``o`` is the
    attention output in ``dtype``, ``indexer_loss`` float32 ``[1]``.
    """

    def __init__(self, scale: float, index_topk: int, layout: str, dtype: ms.dtype) -> None:
        super().__init__()
        self.dtype = dtype
        self.indexer = LightningIndexer(index_topk, layout=layout)
        self.attention = SparseFlashAttention(scale, layout=layout, return_softmax_lse=True)
        self.indexer_loss = IndexerKLLoss(scale, layout=layout)

    def _shape(self, t: Tensor, lead: tuple) -> Tensor:
        return t.reshape(lead + t.shape[1:]).astype(self.dtype)

    def construct(self, q_lat: Tensor, q_pe: Tensor, latent: Tensor, k_pe: Tensor, q_idx: Tensor, k_idx: Tensor,
                  weights: Tensor, lengths_q: Tensor | None, lengths_k: Tensor | None, lead_q: tuple, lead_k: tuple,
                  sinks: Tensor | None = None) -> tuple[Tensor, Tensor]:
        q_idx, k_idx, weights = q_idx.astype(self.dtype), k_idx.astype(self.dtype), weights.astype(ms.float32)
        indices, _ = self.indexer(q_idx, k_idx, weights, lengths_q, lengths_k)
        query, key = self._shape(q_lat, lead_q), self._shape(latent, lead_k)
        query_rope, key_rope = self._shape(q_pe, lead_q), self._shape(k_pe, lead_k)
        # value=None: the latent is key and value; the kernel sums their gradients in float32.
        o, softmax_max, softmax_sum = self.attention(query, key, None, indices, query_rope, key_rope, lengths_q,
                                                     lengths_k, sinks)
        # The KL loss sees the main attention as constants, recast from detached float32 tensors so
        # no low-precision tensor feeds two consumers (autodiff would add their gradients with a
        # bfloat16 AddN, which MindSpore's CPU backend lacks).
        stop = msops.stop_gradient
        loss = self.indexer_loss(
            self._shape(stop(q_lat), lead_q), self._shape(stop(latent), lead_k), q_idx, k_idx, weights, indices,
            softmax_max, softmax_sum, self._shape(stop(q_pe), lead_q), self._shape(stop(k_pe), lead_k),
            lengths_q, lengths_k, None if sinks is None else stop(sinks))
        return o, loss
