"""MindSpore 2.10's built-in ``sparse_flash_attention`` and ``lightning_indexer`` on CPU.

The two functions here take exactly the signatures MindSpore documents for its built-ins (the first
line of each docstring in ``mindspore/ops/functional_overload.py``) and return what they return,
computed by this package's kernels (``ms_grad_ops.ops``). ``install()`` binds them onto every name
through which code reaches the built-ins (``mindspore.ops.sparse_flash_attention``,
``mindspore.ops.function.nn_func.lightning_indexer``, ... and any module that imported them by name)
when the device target is CPU, so unmodified MindSpore code (MindSpore Transformers' DSA layers)
runs there, GRAPH mode included: an attribute rebound on ``mindspore.ops`` is what a graph resolves
at compile time. ``uninstall()`` puts MindSpore's functions back. On Ascend nothing is touched.

``lightning_indexer_grad`` takes CANN's ``LightningIndexerGrad`` argument order (MindSpore has no
public function of that name, so ``install()`` binds nothing there). ``npu_dense_lightning_indexer_softmax_lse``
and ``npu_dense_lightning_indexer_grad_kl_loss`` take the signatures of hyper-parallel's wrappers
(``hyper_parallel.custom_ops.experimental``), which MindSpore Transformers' DSA calls for its dense warm-up
(``dsa_indexer.py``, ``dsa_indexer_loss.py``); hyper-parallel is not on PyPI and wraps Ascend kernels only, so
code importing them from here runs on CPU (``install()`` binds nothing for them either).

Arguments that cannot be honoured on CPU raise a ``ValueError`` naming the op and the argument:
``block_table`` (PageAttention) and the ``PA_BSND`` layout, unequal query/key layouts, a layout the
table's ``layout`` does not have, ``pre_tokens``/``next_tokens`` other than their defaults, an
``attention_mode`` other than 0/2. The attributes passed on (``sparse_mode``, ``sparse_count``, ...)
are checked by the ops, against their domains in the table.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence

import mindspore as ms
from mindspore import Tensor
from mindspore import ops as msops
from mindspore.ops import constexpr

from . import cpu_gaps as _cpu_gaps
from . import ops as _ops
from ._specs import OP_SPECS

__all__ = ["install", "installed", "lightning_indexer", "lightning_indexer_grad",
           "npu_dense_lightning_indexer_grad_kl_loss", "npu_dense_lightning_indexer_softmax_lse",
           "sparse_flash_attention", "uninstall"]

# The built-ins' default for pre_tokens/next_tokens; 2**31 - 1 (CANN's aclnn default, this
# package's docs/contract.md section 0.4) means the same "unbounded" and is accepted too.
_UNBOUNDED = 2**63 - 1
_UNBOUNDED_VALUES = (2**63 - 1, 2**31 - 1)
# The layouts the built-ins' layout_query/layout_kv/layout_key may name: the table's layout attribute's.
_LAYOUTS = OP_SPECS["sparse_flash_attention"].attr("layout").domain.values
# attention_mode: 0 (the default: plain attention, rope optional) and 2 (MLA-absorb, which the
# built-in requires on Ascend and which needs the rope pair). The kernel computes both the same way.
_ATTENTION_MODES = (0, 2)


def _bad(op: str, arg: str, value: object, why: str) -> ValueError:
    return ValueError(f"{op}: argument '{arg}' = {value!r} is not supported by ms_grad_ops on CPU: {why}")


@constexpr
def _check_common(op: str, has_block_table: bool, layout_q: str, kv_arg: str, layout_kv: str, pre_tokens: int,
                  next_tokens: int) -> bool:
    """The arguments both built-ins share and pass on to no attribute of their own name. constexpr: in
    GRAPH mode this runs at compile time."""
    if has_block_table:
        raise _bad(op, "block_table", "a Tensor", "PageAttention (a paged KV cache) is not implemented; pass the "
                   "key tensor itself with layout 'BSND' or 'TND'")
    if layout_kv == "PA_BSND":
        raise _bad(op, kv_arg, layout_kv, "PageAttention (a paged KV cache) is not implemented")
    if layout_q not in _LAYOUTS:
        raise _bad(op, "layout_query", layout_q, f"expected one of {_LAYOUTS}")
    if layout_kv != layout_q:
        raise _bad(op, kv_arg, layout_kv, f"it must equal layout_query ({layout_q!r}); the kernels take one layout")
    for arg, value in (("pre_tokens", pre_tokens), ("next_tokens", next_tokens)):
        if isinstance(value, bool) or value not in _UNBOUNDED_VALUES:
            raise _bad(op, arg, value, f"only the default {_UNBOUNDED} (2^63-1, or 2^31-1) is supported: modes 0/3 "
                       "take no token band")
    return True


@constexpr
def _check_attention_mode(attention_mode: int, has_rope: bool) -> bool:
    if isinstance(attention_mode, bool) or attention_mode not in _ATTENTION_MODES:
        raise _bad("sparse_flash_attention", "attention_mode", attention_mode,
                   "only 0 and 2 (MLA-absorb) have a meaning here")
    if attention_mode == 2 and not has_rope:
        raise ValueError("sparse_flash_attention: attention_mode=2 (MLA-absorb) needs 'query_rope' and 'key_rope'")
    return True


def sparse_flash_attention(query: Tensor, key: Tensor, value: Tensor, sparse_indices: Tensor, scale_value: float, *,
                           block_table: Tensor | None = None,
                           actual_seq_lengths_query: Tensor | Sequence[int] | None = None,
                           actual_seq_lengths_kv: Tensor | Sequence[int] | None = None,
                           query_rope: Tensor | None = None, key_rope: Tensor | None = None,
                           sparse_block_size: int = 1, layout_query: str = "BSND", layout_kv: str = "BSND",
                           sparse_mode: int = 3, pre_tokens: int = _UNBOUNDED, next_tokens: int = _UNBOUNDED,
                           attention_mode: int = 0, return_softmax_lse: bool = False
                           ) -> tuple[Tensor, Tensor, Tensor]:
    """``mindspore.ops.sparse_flash_attention`` on this package's kernel (``ms_grad_ops.ops``).

    Same arguments as MindSpore 2.10's built-in. ``layout_query`` (= ``layout_kv``) becomes
    ``layout``; ``value`` is passed as given (the built-in requires it; pass ``None`` to get the
    fused shared-latent backward, which the built-in's signature does not offer). Differentiable
    (fused ``sparse_flash_attention_grad`` bprop; the statistics carry no gradient), any float
    dtype, any D/Dr/N1/K on CPU.

    Returns:
        ``(attention_out, softmax_max, softmax_sum)`` whatever ``return_softmax_lse`` says (the
        built-in's tuple): attention_out like query; float32 statistics ``[B, N2, S1, N1/N2]``
        (BSND) or ``[N2, T1, N1/N2]`` (TND), natural base, over the scaled logits. With
        ``return_softmax_lse=False`` the built-in leaves them unspecified; here they are the real
        statistics either way.
    """
    op = "sparse_flash_attention"
    _check_common(op, block_table is not None, layout_query, "layout_kv", layout_kv, pre_tokens, next_tokens)
    _check_attention_mode(attention_mode, query_rope is not None and key_rope is not None)
    return _ops.sparse_flash_attention(query, key, value, sparse_indices, query_rope, key_rope,
                                       actual_seq_lengths_query, actual_seq_lengths_kv, scale_value=scale_value,
                                       sparse_block_size=sparse_block_size, layout=layout_query,
                                       sparse_mode=sparse_mode)


def lightning_indexer(query: Tensor, key: Tensor, weights: Tensor, *,
                      actual_seq_lengths_query: Tensor | Sequence[int] | None = None,
                      actual_seq_lengths_key: Tensor | Sequence[int] | None = None,
                      block_table: Tensor | None = None, layout_query: str = "BSND", layout_key: str = "BSND",
                      sparse_count: int = 2048, sparse_mode: int = 3, pre_tokens: int = _UNBOUNDED,
                      next_tokens: int = _UNBOUNDED, return_value: bool = False) -> tuple[Tensor, Tensor]:
    """``mindspore.ops.lightning_indexer`` on this package's kernel (``ms_grad_ops.ops``).

    Same arguments as MindSpore 2.10's built-in; ``layout_query`` (= ``layout_key``) becomes
    ``layout``. Ties go to the lower key index.

    Returns:
        ``(sparse_indices, sparse_values)``, ``[B, S1, 1, sparse_count]`` (BSND) or
        ``[T1, 1, sparse_count]`` (TND): int32 key indices local to the batch in descending score
        order, ``-1`` in slots beyond the visible keys; their scores ``sum_g w_g relu(q_g . k)``
        in the query's dtype (rounded from the kernel's float32; ``-inf`` in the ``-1`` slots),
        differentiable with respect to query, key and weights through the values (the indices
        carry none). With ``return_value=False`` the built-in leaves the values unspecified; here
        they are the real values either way.
    """
    op = "lightning_indexer"
    _check_common(op, block_table is not None, layout_query, "layout_key", layout_key, pre_tokens, next_tokens)
    indices, values = _ops.lightning_indexer(query, key, weights, actual_seq_lengths_query, actual_seq_lengths_key,
                                             sparse_count=sparse_count, layout=layout_query, sparse_mode=sparse_mode)
    return indices, msops.cast(values, query.dtype)


@constexpr
def _check_unbounded(op: str, pre_tokens: int, next_tokens: int) -> bool:
    """CANN's token band, which the ops have not (layout and sparse_mode are their attributes: they check them)."""
    for arg, value in (("pre_tokens", pre_tokens), ("next_tokens", next_tokens)):
        if isinstance(value, bool) or value not in _UNBOUNDED_VALUES:
            raise _bad(op, arg, value, f"only the default {_UNBOUNDED} (2^63-1, or 2^31-1) is supported")
    return True


def lightning_indexer_grad(query: Tensor, key: Tensor, dy: Tensor, sparse_indices: Tensor, weights: Tensor,
                           actual_seq_lengths_query: Tensor | Sequence[int] | None = None,
                           actual_seq_lengths_key: Tensor | Sequence[int] | None = None, layout: str = "BSND",
                           sparse_mode: int = 3, pre_tokens: int = _UNBOUNDED, next_tokens: int = _UNBOUNDED
                           ) -> tuple[Tensor, Tensor, Tensor]:
    """CANN's ``LightningIndexerGrad`` in its own argument order (``aclnnLightningIndexerGrad``,
    torch_npu's ``npu_lightning_indexer_grad`` and MindSpore 2.10's internal primitive
    ``ops.auto_generate.LightningIndexerGrad``, which has no public function): ``query``, ``key``
    are the indexer's query_index/key_index, ``dy`` the gradient of ``sparse_values`` in any float
    dtype (CANN's: the query's), then ``sparse_indices`` and ``weights``. Computed by
    ``ms_grad_ops.ops.lightning_indexer_grad`` (its order follows the forward's inputs, its
    ``d_values`` float32: ``dy`` is widened to float32 exactly). ``install()`` binds nothing to
    this name: MindSpore has no public one to replace.

    Returns:
        ``(d_query, d_key, d_weights)`` shaped and typed like query, key and weights.
    """
    _check_unbounded("lightning_indexer_grad", pre_tokens, next_tokens)
    return _ops.lightning_indexer_grad(query, key, weights, sparse_indices, msops.cast(dy, ms.float32),
                                       actual_seq_lengths_query, actual_seq_lengths_key, layout=layout,
                                       sparse_mode=sparse_mode)


def npu_dense_lightning_indexer_softmax_lse(query_index: Tensor, key_index: Tensor, weights: Tensor, *,
                                            actual_seq_qlen: Tensor | Sequence[int] | None = None,
                                            actual_seq_klen: Tensor | Sequence[int] | None = None,
                                            layout: str = "BSND", sparse_mode: int = 3, pre_tokens: int = _UNBOUNDED,
                                            next_tokens: int = _UNBOUNDED) -> tuple[Tensor, Tensor]:
    """hyper-parallel's ``npu_dense_lightning_indexer_softmax_lse`` on
    ``ms_grad_ops.ops.dense_lightning_indexer_softmax_lse`` (CANN's ``DenseLightningIndexerSoftmaxLse``):
    ``actual_seq_qlen``/``actual_seq_klen`` are the lengths (TND cumulative, as CANN's);
    ``pre_tokens``/``next_tokens`` only their unbounded default.

    Returns:
        ``(softmax_max_index, softmax_sum_index)``, float32 ``[B, 1, S1]`` (BSND) / ``[1, T1]`` (TND), CANN's shapes.
    """
    _check_unbounded("dense_lightning_indexer_softmax_lse", pre_tokens, next_tokens)
    return _ops.dense_lightning_indexer_softmax_lse(query_index, key_index, weights, actual_seq_qlen,
                                                    actual_seq_klen, layout=layout, sparse_mode=sparse_mode)


def _stats_of_key_heads(stat: Tensor, key: Tensor, layout: str) -> Tensor:
    """CANN's per-head statistics ``[B, N1, S1, 1]`` / ``[N1, T1, 1]`` (FlashAttention's, sliced to one column)
    in this package's layout for a one-head key (MLA-absorbed MQA): ``[B, 1, S1, N1]`` / ``[1, T1, N1]``. With
    N2 = N1 (CANN's MHA) the two layouts are the same, and any other shape is passed on for the op's rules."""
    bsnd = layout == "BSND"
    if stat.ndim != (4 if bsnd else 3) or key.shape[-2] != 1 or stat.shape[-1] != 1:
        return stat
    if stat.shape[1 if bsnd else 0] == 1:  # one query head: both layouts are the same
        return stat
    return stat.transpose(0, 3, 2, 1) if bsnd else stat.transpose(2, 1, 0)


def npu_dense_lightning_indexer_grad_kl_loss(query: Tensor, key: Tensor, query_index: Tensor, key_index: Tensor,
                                             weights: Tensor, softmax_max: Tensor, softmax_sum: Tensor,
                                             softmax_max_index: Tensor, softmax_sum_index: Tensor, scale_value: float,
                                             *, query_rope: Tensor | None = None, key_rope: Tensor | None = None,
                                             actual_seq_qlen: Tensor | Sequence[int] | None = None,
                                             actual_seq_klen: Tensor | Sequence[int] | None = None,
                                             layout: str = "BSND", sparse_mode: int = 3,
                                             pre_tokens: int = _UNBOUNDED, next_tokens: int = _UNBOUNDED
                                             ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """hyper-parallel's ``npu_dense_lightning_indexer_grad_kl_loss`` on
    ``ms_grad_ops.ops.dense_lightning_indexer_grad_kl_loss`` (CANN's ``DenseLightningIndexerGradKLLoss``).

    CANN's main attention is plain MHA: key ``[.., N1, D]`` with statistics ``[B, N1, S1, 1]`` / ``[N1, T1, 1]``,
    which is this package's layout for N2 = N1 and is passed on as it is. A one-head key (MLA-absorbed MQA, what
    ``sparse_flash_attention`` computes) takes this package's ``[B, 1, S1, N1]`` / ``[1, T1, N1]``, and CANN's
    per-head form is transposed to it. ``pre_tokens``/``next_tokens``: only their unbounded default.

    Returns:
        ``(d_query_index, d_key_index, d_weights, loss)``: the gradients for d(loss) = 1 and the loss float32
        ``[1]``, the raw sum over tokens as CANN returns it (mindformers' ``DSAIndexerLoss`` divides it by the
        token count and scales the gradients by the incoming gradient).
    """
    _check_unbounded("dense_lightning_indexer_grad_kl_loss", pre_tokens, next_tokens)
    softmax_max = _stats_of_key_heads(softmax_max, key, layout)
    softmax_sum = _stats_of_key_heads(softmax_sum, key, layout)
    return _ops.dense_lightning_indexer_grad_kl_loss(
        query, key, query_index, key_index, weights, softmax_max, softmax_sum, softmax_max_index, softmax_sum_index,
        query_rope, key_rope, actual_seq_qlen, actual_seq_klen, scale_value=scale_value, layout=layout,
        sparse_mode=sparse_mode)



# ---- DeepSeek-V4 attention (issue 38): hyper-parallel's npu_sparse_flash_mla(_grad) on the package's kernels.
__all__ += ["npu_sparse_flash_mla", "npu_sparse_flash_mla_grad"]
Ints = Tensor | Sequence[int] | None


def npu_sparse_flash_mla(query: Tensor, *, ori_kv: Tensor | None = None, cmp_kv: Tensor | None = None,
                         cmp_sparse_indices: Tensor | None = None, cu_seq_lens_q: Ints = None,
                         cu_seq_lens_ori_kv: Ints = None, cu_seq_lens_cmp_kv: Ints = None, seqused_q: Ints = None,
                         seqused_ori_kv: Ints = None, seqused_cmp_kv: Ints = None, cmp_residual_kv: Ints = None,
                         sinks: Tensor | None = None, softmax_scale: float = 1.0, cmp_ratio: int = 1,
                         ori_mask_mode: int = 4, cmp_mask_mode: int = 3, ori_win_left: int = 127,
                         ori_win_right: int = 0, layout: str = "BSND", return_softmax_lse: bool = False
                         ) -> tuple[Tensor, Tensor]:
    """hyper-parallel's ``npu_sparse_flash_mla`` on ``ms_grad_ops.ops.sparse_flash_mla`` (CANN's
    ``SparseFlashMla``; docs/contract.md section 8). ``ori_kv`` is required (CANN requires it in every mode).

    Returns:
        ``(attn_out, softmax_lse)``; softmax_lse (float32, the sink included) is computed and returned whatever
        ``return_softmax_lse`` says (CANN returns a placeholder when it is False).
    """
    if ori_kv is None:
        raise ValueError("sparse_flash_mla: argument 'ori_kv' is required (the original tokens, every mode)")
    return _ops.sparse_flash_mla(query, ori_kv, cmp_kv, None, cmp_sparse_indices, cu_seq_lens_q, cu_seq_lens_ori_kv,
                                 cu_seq_lens_cmp_kv, seqused_q, seqused_ori_kv, seqused_cmp_kv, cmp_residual_kv,
                                 sinks, softmax_scale=softmax_scale, cmp_ratio=cmp_ratio, ori_mask_mode=ori_mask_mode,
                                 cmp_mask_mode=cmp_mask_mode, ori_win_left=ori_win_left, ori_win_right=ori_win_right,
                                 layout=layout)


def npu_sparse_flash_mla_grad(query: Tensor, dout: Tensor, attn_out: Tensor, softmax_lse: Tensor, *,
                              ori_kv: Tensor | None = None, cmp_kv: Tensor | None = None,
                              ori_sparse_indices: Tensor | None = None, cmp_sparse_indices: Tensor | None = None,
                              cu_seq_lens_q: Ints = None, cu_seq_lens_ori_kv: Ints = None,
                              cu_seq_lens_cmp_kv: Ints = None, seqused_q: Ints = None, seqused_ori_kv: Ints = None,
                              seqused_cmp_kv: Ints = None, cmp_residual_kv: Ints = None,
                              ori_topk_length: Tensor | None = None, cmp_topk_length: Tensor | None = None,
                              sinks: Tensor | None = None, softmax_scale: float = 1.0, cmp_ratio: int = 1,
                              ori_mask_mode: int = 4, cmp_mask_mode: int = 3, ori_win_left: int = 127,
                              ori_win_right: int = 0, layout: str = "BSND") -> tuple[Tensor | None, ...]:
    """hyper-parallel's ``npu_sparse_flash_mla_grad`` on ``ms_grad_ops.ops.sparse_flash_mla_grad`` (CANN's
    ``SparseFlashMlaGrad``). ``ori_topk_length``/``cmp_topk_length`` (CANN: the exact count of valid slots per row,
    with mask mode 0) are not taken: every slot of an index row is read, -1 skipped (a ``ValueError`` if given).

    Returns:
        ``(d_query, d_ori_kv, d_cmp_kv, d_sinks, ori_softmax_l1_norm, cmp_softmax_l1_norm)``; None for the
        gradient of an absent input and the norm of absent indices.
    """
    for arg, value in (("ori_topk_length", ori_topk_length), ("cmp_topk_length", cmp_topk_length)):
        if value is not None:
            raise _bad("sparse_flash_mla_grad", arg, "<tensor>", "every slot of an index row is read (-1 skipped), "
                       "so no per-row count is needed; pass None")
    if ori_kv is None:
        raise ValueError("sparse_flash_mla_grad: argument 'ori_kv' is required (the original tokens, every mode)")
    return _ops.sparse_flash_mla_grad(query, dout, attn_out, softmax_lse, ori_kv, cmp_kv, ori_sparse_indices,
                                      cmp_sparse_indices, cu_seq_lens_q, cu_seq_lens_ori_kv, cu_seq_lens_cmp_kv,
                                      seqused_q, seqused_ori_kv, seqused_cmp_kv, cmp_residual_kv, sinks,
                                      softmax_scale=softmax_scale, cmp_ratio=cmp_ratio, ori_mask_mode=ori_mask_mode,
                                      cmp_mask_mode=cmp_mask_mode, ori_win_left=ori_win_left,
                                      ori_win_right=ori_win_right, layout=layout)


_OURS = {"sparse_flash_attention": sparse_flash_attention, "lightning_indexer": lightning_indexer}
# (module name, attribute) -> MindSpore's function it held before install().
_saved: dict[tuple[str, str], object] = {}


def _device_target() -> str:
    return ms.get_context("device_target")


def _mindspore_builtins() -> dict[str, object]:
    """MindSpore's own function objects (whatever install() has rebound since)."""
    from mindspore.ops import functional_overload

    found = {name: _saved.get(("mindspore.ops.functional_overload", name), getattr(functional_overload, name))
             for name in _OURS}
    return found


def installed() -> bool:
    """Whether ``install()`` has rebound the built-ins (and ``uninstall()`` not yet restored them)."""
    return bool(_saved)


def install() -> bool:
    """On a CPU device target, binds this module's two functions onto every module attribute that
    holds MindSpore's built-in ``sparse_flash_attention``/``lightning_indexer``: ``mindspore.ops``,
    ``mindspore.ops.functional_overload``, ``mindspore.ops.function``, ``mindspore.ops.function.nn_func``
    and any module already imported that took them by name. Modules imported later that do
    ``from mindspore import ops`` (MindSpore Transformers) or import the names see ours. Call it
    before compiling graphs that use them. Idempotent; returns True when ours are bound, False on
    another device target (nothing is touched there: Ascend keeps its own kernels)."""
    if _device_target() != "CPU":
        return False
    originals = _mindspore_builtins()
    for module_name, module in list(sys.modules.items()):
        attrs = getattr(module, "__dict__", None)
        if not isinstance(attrs, dict):
            continue
        for name, original in originals.items():
            if attrs.get(name) is original:
                _saved[(module_name, name)] = original
                setattr(module, name, _OURS[name])
    _cpu_gaps.install()
    return True


def uninstall() -> None:
    """Restores MindSpore's functions wherever ``install()`` bound ours (attributes rebound by
    someone else since are left alone). Idempotent."""
    for (module_name, name), original in list(_saved.items()):
        module = sys.modules.get(module_name)
        if module is not None and getattr(module, name, None) is _OURS[name]:
            setattr(module, name, original)
        del _saved[(module_name, name)]
    _cpu_gaps.uninstall()


# ---------------------------------------------------------------- DeepSeek-V4 (issue 38): hyper-parallel's
# wrappers of CANN's V4 indexer ops, on this package's kernels. CANN's TND lengths are cu_seq_lens (B + 1
# entries, leading 0; this package's are cumulative without it) and seqused (per-batch used lengths: this
# package's BSND lengths).

def _cumulative(op: str, arg: str, cu: Tensor | Sequence[int] | None) -> Tensor | list[int] | None:
    """CANN's ``cu_seq_lens`` as this package's TND lengths: the leading 0 dropped. A tensor whose first entry is
    not 0 is shifted by it, so its last entry no longer equals the token count: the kernel's RuntimeError."""
    if cu is None:
        return None
    if isinstance(cu, Tensor):
        return cu[1:] - cu[:1]
    values = [int(x) for x in cu]
    if len(values) < 2 or values[0] != 0:
        raise _bad(op, arg, values, "cu_seq_lens need B + 1 entries starting with 0")
    return values[1:]


def _v4_lengths(op: str, layout: str, cu_q: object, cu_k: object, used_q: object, used_k: object) -> tuple:
    """(actual_seq_lengths_query, actual_seq_lengths_key) of the package from CANN's V4 arguments: TND takes
    cu_seq_lens only, BSND seqused only (each the meaning the other layout has no use for)."""
    if layout == "TND":
        for arg, value in (("seqused_q", used_q), ("seqused_k", used_k)):
            if value is not None:
                raise _bad(op, arg, "a value", "seqused in TND (tokens unused inside a packed sequence) is not "
                           "implemented (CANN's A2/A3 kernels take none either); pass the cu_seq_lens of the used "
                           "tokens")
        return _cumulative(op, "cu_seq_lens_q", cu_q), _cumulative(op, "cu_seq_lens_k", cu_k)
    for arg, value in (("cu_seq_lens_q", cu_q), ("cu_seq_lens_k", cu_k)):
        if value is not None:
            raise _bad(op, arg, "a value", "cu_seq_lens are TND's; BSND takes per-batch lengths as seqused_q/seqused_k")
    return used_q, used_k


def npu_sparse_lightning_indexer_kl_loss_grad(query: Tensor, key: Tensor, weights: Tensor, sparse_indices: Tensor,
                                              attn_softmax_l1_norm: Tensor, *, cu_seq_lens_q: object = None,
                                              cu_seq_lens_k: object = None, seqused_q: object = None,
                                              seqused_k: object = None, cmp_residual_k: object = None,
                                              layout: str = "BSND", mask_mode: int = 3, cmp_ratio: int = 1
                                              ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """hyper-parallel's ``npu_sparse_lightning_indexer_kl_loss_grad`` (CANN's ``SparseLightningIndexerKLLossGrad``)
    on ``ms_grad_ops.ops.sparse_lightning_indexer_kl_loss_grad``: ``query``/``key``/``weights`` are the
    indexer's, ``attn_softmax_l1_norm`` the target per slot (the main attention grad's ``cmp_softmax_l1_norm``).
    TND lengths are CANN's ``cu_seq_lens`` (B + 1 entries, leading 0); BSND takes per-batch ``seqused_q/k``;
    ``mask_mode`` is the op's ``sparse_mode`` (0 or 3).

    Returns:
        ``(d_query, d_key, d_weights, softmax_out)``, CANN's four outputs, for d(loss) = 1; the loss that
        ``ms_grad_ops.ops.sparse_lightning_indexer_kl_loss_grad`` also returns is left out, as CANN has none.
    """
    op = "sparse_lightning_indexer_kl_loss_grad"
    lens_q, lens_k = _v4_lengths(op, layout, cu_seq_lens_q, cu_seq_lens_k, seqused_q, seqused_k)
    return _ops.sparse_lightning_indexer_kl_loss_grad(query, key, weights, sparse_indices, attn_softmax_l1_norm,
                                                      lens_q, lens_k, cmp_residual_k, layout=layout,
                                                      sparse_mode=mask_mode, cmp_ratio=cmp_ratio)[:4]


def npu_lightning_indexer(query: Tensor, key: Tensor, weights: Tensor, sparse_count: int, *,
                          cu_seq_lens_q: object = None, cu_seq_lens_k: object = None, cmp_residual_k: object = None,
                          block_table: Tensor | None = None, layout: str = "BSND", sparse_mode: int = 0,
                          cmp_ratio: int = 1, return_value: bool = False) -> tuple[Tensor, Tensor]:
    """hyper-parallel's ``npu_lightning_indexer`` (CANN's ``LightningIndexerV2``, compressed keys) on
    ``ms_grad_ops.ops.lightning_indexer``: top-``sparse_count`` keys of the indexer query, key and weights;
    ``cmp_ratio``/``cmp_residual_k`` as docs/contract.md section 9.1 says. TND lengths are CANN's ``cu_seq_lens``
    (B + 1 entries, leading 0); BSND rows are all real (CANN's ``seqused`` has no argument here). ``block_table``
    (a paged cache) is refused with a ValueError.

    Returns:
        ``(sparse_indices, sparse_values)``: int32 indices local to the batch, ``-1`` beyond the visible keys, and
        their float32 scores (CANN's V2 type; ``-inf`` in ``-1`` slots), returned whatever ``return_value`` says
        (CANN leaves them unspecified when it is False).
    """
    op = "lightning_indexer"
    if block_table is not None:
        raise _bad(op, "block_table", "a Tensor", "PageAttention (a paged KV cache) is not implemented; pass the "
                   "key tensor itself")
    lens_q, lens_k = _v4_lengths(op, layout, cu_seq_lens_q, cu_seq_lens_k, None, None)
    return _ops.lightning_indexer(query, key, weights, lens_q, lens_k, cmp_residual_k, sparse_count=sparse_count,
                                  layout=layout, sparse_mode=sparse_mode, cmp_ratio=cmp_ratio)


__all__ += ["npu_lightning_indexer", "npu_sparse_lightning_indexer_kl_loss_grad"]
