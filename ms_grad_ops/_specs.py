"""The one table of op names, inputs, outputs and attributes, and of the forward/grad pairing.

Every layer derives from it: the CPU reg_info and the Ascend reg_info in ``_custom.py``, the
attribute checks of ``_checks.py``, the glue that ``scripts/gen_glue.py`` generates (C++ slot
indices, attribute enums and domain checks, the bprops of ``_bprop_table.py``, the attribute block
of each ``docs/ops`` page), and the Ascend OpDef sources are checked against it by the tests, so
the names, domains and limits can never drift.
Standard library only: the generators load this file by path, without MindSpore.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field, replace

INT32_MIN, INT32_MAX = -2**31, 2**31 - 1
FLOAT32_MAX = 3.4028234663852886e38


@dataclass(frozen=True)
class Choice:
    """A choice attribute: one of ``values`` (str, or int with one ``meanings`` entry each)."""

    values: tuple[str, ...] | tuple[int, ...]
    meanings: tuple[str, ...] = ()

    def __contains__(self, value: object) -> bool:
        return value in self.values

    @property
    def text(self) -> str:
        if self.meanings:
            return "one of " + ", ".join(f"{v} ({m})" for v, m in zip(self.values, self.meanings))
        return "one of " + ", ".join(f'"{v}"' for v in self.values)


@dataclass(frozen=True)
class IntRange:
    """An int attribute in [lo, hi] (int32 at the widest: the OpDefs' and the index outputs' type)."""

    lo: int = INT32_MIN
    hi: int = INT32_MAX

    def __contains__(self, value: object) -> bool:
        return self.lo <= value <= self.hi

    @property
    def text(self) -> str:
        return f"an integer in [{self.lo}, {self.hi}]"


@dataclass(frozen=True)
class FloatRange:
    """A float attribute in [lo, hi], finite (float32 at the widest: the kernels' type)."""

    lo: float = -FLOAT32_MAX
    hi: float = FLOAT32_MAX

    def __contains__(self, value: object) -> bool:
        return self.lo <= value <= self.hi  # False for NaN

    @property
    def text(self) -> str:
        if (self.lo, self.hi) == (-FLOAT32_MAX, FLOAT32_MAX):
            return "a finite float32 (|x| <= 3.4028235e+38)"
        return f"a float in [{self.lo!r}, {self.hi!r}]"


@dataclass(frozen=True)
class Flag:
    """A bool attribute: any value is inside."""

    def __contains__(self, value: object) -> bool:
        return True

    text = "a bool"


Domain = Choice | IntRange | FloatRange | Flag


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = _Required()
"""The default of an attribute that has none: callers must pass it (no sensible value exists)."""

DOMAIN_ERROR = "{op}: attribute '{attr}' must be {domain}, got {got}"
"""The one wording of every attribute domain error, in every layer (the C++ one is generated from it)."""

BACKENDS = ("Ascend",)
"""The backends an attribute may state limits for (a device target's name)."""


@dataclass(frozen=True)
class AttrSpec:
    """A primitive attribute: its domain (``Choice``, ``IntRange``, ``FloatRange``, ``Flag``), its
    default (``REQUIRED``: none) and the narrower domains some backends accept (``limits``).
    ``about`` says what it means, for its docs page."""

    name: str
    domain: Domain
    default: object = REQUIRED
    about: str = ""
    limits: tuple[tuple[str, Domain], ...] = ()
    """(backend, its narrower domain): the backend's kernels take no value outside it."""

    @property
    def type(self) -> str:
        """The CustomRegOp/OpDef attribute type: int, float, str or bool."""
        if isinstance(self.domain, Choice):
            return "str" if isinstance(self.domain.values[0], str) else "int"
        return {IntRange: "int", FloatRange: "float", Flag: "bool"}[type(self.domain)]

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def domains(self, backend: str | None = None) -> list[tuple[Domain, str]]:
        """(domain, where) the value must be inside on ``backend`` (None: any backend): the
        attribute's own domain (where ""), then the backend's limit (where " on <backend>")."""
        return [(self.domain, "")] + [(d, f" on {b}") for b, d in self.limits if b == backend]

    def error(self, op: str, value: object, backend: str | None = None) -> str | None:
        """The domain error of ``value`` (already of the attribute's type) on ``backend``, or None."""
        for domain, where in self.domains(backend):
            if value not in domain:
                got = f'"{value}"' if isinstance(value, str) else repr(value)
                return DOMAIN_ERROR.format(op=op, attr=self.name, domain=domain.text + where, got=got)
        return None


@dataclass(frozen=True)
class SizeLimit:
    """A size a backend's kernel takes only in [lo, hi], though the shape rules accept any: its
    tiling refuses the others with ``text``."""

    name: str
    what: str
    lo: int
    hi: int

    def text(self, backend: str) -> str:
        return f"{self.name} ({self.what}) must be in [{self.lo}, {self.hi}] on {backend}"


@dataclass(frozen=True)
class OpSpec:
    """One op: snake ``name`` (Python, files), CamelCase ``op_type`` (C symbols, OpDef)."""

    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple[AttrSpec, ...] = ()
    dtypes: tuple[tuple[str, ...], ...] = ()
    """Accepted dtype combinations on CPU, one per row, over inputs then outputs (reg_info dtype_format)."""
    ascend_dtypes: tuple[tuple[str, ...], ...] = ()
    """The combinations the Ascend OpDef declares (16-bit floats, float32 statistics/weights, int32
    indices; lengths int32, or int32/int64 where the kernel reads both)."""
    optional: frozenset[str] = frozenset()
    """Inputs that may be absent: Python passes the zero-size placeholder of ``ms_grad_ops/_optional.py``,
    the Ascend OpDef declares them OPTIONAL (CANN may omit them)."""
    ascend_socs: tuple[str, ...] = ("ascend910b", "ascend910_93")
    """The SoCs the Ascend OpDef registers (AddConfig): Atlas A2 and A3, the seed ops' products."""
    size_limits: tuple[tuple[str, SizeLimit], ...] = ()
    """(backend, limit): sizes the backend's kernel bounds beyond the shape rules (its tiling refuses the rest)."""
    cell: str = ""
    """The ``ms_grad_ops.nn`` Cell whose constructor takes this op's attributes and whose construct
    takes its inputs (tests/all_ops/test_signatures.py holds both to the table)."""

    def attr(self, name: str) -> AttrSpec:
        return next(a for a in self.attrs if a.name == name)

    def inputs_parameters(self) -> list[inspect.Parameter]:
        """The inputs as a Python signature takes them (the functional op, a Cell's construct): in
        order, the optional ones that no required input follows defaulting to None (absent)."""
        last_required = max((i for i, n in enumerate(self.inputs) if n not in self.optional), default=-1)
        return [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                  default=None if i > last_required else inspect.Parameter.empty)
                for i, n in enumerate(self.inputs)]

    def attrs_parameters(self, kind: inspect._ParameterKind = inspect.Parameter.KEYWORD_ONLY
                         ) -> list[inspect.Parameter]:
        """The attributes as a Python signature takes them: in order, keyword-only in the functional
        op (a Cell's constructor: positional-or-keyword), a required one without default."""
        return [inspect.Parameter(a.name, kind, default=inspect.Parameter.empty if a.required else a.default)
                for a in self.attrs]

    def signature(self) -> inspect.Signature:
        """The functional op ``ms_grad_ops.ops.<name>`` as the table states it (tests hold the code to it)."""
        return inspect.Signature([*self.inputs_parameters(), *self.attrs_parameters()])


FLOATS = ("float16", "bfloat16", "float32")
INTS = ("int32", "int64")

# rope / rope_grad: q and k share a dtype; cos/sin may use another float dtype; lengths int32/int64.
_ROPE_DTYPES = tuple((x, x, c, c, i, x, x) for x in FLOATS for c in FLOATS for i in INTS)
ASCEND_FLOATS = ("float16", "bfloat16")
_ROPE_ASCEND = tuple((x, x, x, x, "int32", x, x) for x in ASCEND_FLOATS)

# Indexer ops: query/key/query_index/key_index (and ropes) share a float dtype X; weights are X or
# float32; sparse indices int32; statistics float32; each lengths input int32 or int64.
_INDEXER_XW = tuple((x, w) for x in FLOATS for w in dict.fromkeys((x, "float32")))
_LIGHTNING_INDEXER_DTYPES = tuple((x, x, w, lq, lk, lr, "int32", "float32")
                                  for x, w in _INDEXER_XW for lq in INTS for lk in INTS for lr in INTS)
_INDEXER_GRAD_DTYPES = tuple((x, x, x, x, w, "int32", "float32", "float32", x, x, lq, lk, "float32", lr, x, x, w,
                              "float32")
                             for x, w in _INDEXER_XW for lq in INTS for lk in INTS for lr in INTS)
# What their Ascend OpDefs are to declare (issue 11): 16-bit X, weights X or float32, int32 lengths.
_INDEXER_XW_ASCEND = tuple((x, w) for x in ASCEND_FLOATS for w in (x, "float32"))

# The attributes several ops share, each stated once.
_LAYOUT = AttrSpec("layout", Choice(("BSND", "TND")), "BSND",
                   "how the token axes are laid out: BSND [B, S, N, D] or TND [T, N, D] (docs/contract.md section 0.2)")
_SPARSE_MODE = AttrSpec("sparse_mode", Choice((0, 3), ("no mask", "rightDownCausal")), 3,
                        "the mask of each batch (docs/contract.md section 0.4)")
_DETERMINISTIC = AttrSpec("deterministic", Flag(), False,
                          "accepted for API parity: the kernels are deterministic in every mode "
                          "(docs/contract.md section 0.10)")
# CANN declares scale_value REQUIRED (ops-transformer's sparse_flash_attention_def.cpp,
# sparse_lightning_indexer_grad_kl_loss_def.cpp): the logit scale has no value that suits every model.
_SCALE_VALUE = AttrSpec("scale_value", FloatRange(), about="the scale of the logits (1/sqrt(D + Dr) in DeepSeek-V3.2)")
# CANN's LightningIndexer declares sparse_count OPTIONAL with 2048 (lightning_indexer_def.cpp),
# DeepSeek-V3.2's top-k. Its upper bound is the size rule of infer_shape/lightning_indexer.h: 2**20.
_SPARSE_COUNT = AttrSpec("sparse_count", IntRange(1, 2**20), 2048,
                         "K, the keys selected per query row (the size rule of docs/contract.md section 4.1)",
                         (("Ascend", IntRange(1, 16384)),))
_UNBOUNDED = Choice((INT32_MAX,), ("unbounded",))
# The indexer heads the Ascend kernels hold in one UB vector.
_NIDX_ASCEND = ("Ascend", SizeLimit("Nidx", "indexer heads, query_index dim -2", 1, 128))
_K_ASCEND = ("Ascend", SizeLimit("K", "slots of sparse_indices, its last dim", 1, 16384))
# The dense warm-up pair (CANN's DenseLightningIndexerSoftmaxLse / DenseLightningIndexerGradKLLoss): CANN's
# kernels take only the right-down causal mask, so ours on Ascend do too; the CPU kernels take both.
_SPARSE_MODE_CAUSAL_ASCEND = replace(_SPARSE_MODE, limits=(("Ascend", Choice((3,), ("rightDownCausal",))),))
_DENSE_STATS = ("softmax_max_index", "softmax_sum_index")
# The head vectors of the Ascend KL kernels (softmax_max/sum of one token) sit in UB.
_N1_ASCEND = ("Ascend", SizeLimit("N1", "attention heads, query dim -2", 1, 256))
# The SoCs CANN registers each op for (ops-transformer's <op>_def.cpp AddConfig, and its docs' support
# tables; mirror-cann/ops-transformer @3a280bcc3): SparseFlashAttention(Grad), LightningIndexer,
# SparseLightningIndexerGradKLLoss and DenseLightningIndexerSoftmaxLse on Atlas A2/A3 and Ascend 950;
# LightningIndexerGrad and DenseLightningIndexerGradKLLoss on A2/A3 only (LightningIndexerGrad's
# def.cpp adds ascend950 but its docs mark 950 unsupported and it has no arch35 kernel). Ours take
# CANN's SoCs; the twin tests them on arch 2201 and, for 950, 3510.
# CANN's 950-only sizes (SFAG: N1 also 48/24/12/6/3; SLIGKL: the pair N1 48 / Nidx 24, B unbounded)
# are inside the sizes our kernels take on every SoC (any N1; N1 <= 256, Nidx <= 128 and any B for the
# KL loss): no limit of CANN's is kept, so none is stated per SoC.
_A2_A3 = ("ascend910b", "ascend910_93")
_ATTN_SOCS = ("ascend910b", "ascend910_93", "ascend950")

# DeepSeek-V4's indexer (issue 38): compressed keys (cmp_ratio original tokens per key, the last
# incomplete block's size per batch in cmp_residual_k) and CANN's SparseLightningIndexerKLLossGrad,
# the KL gradient against a target given as an input. CANN's range of cmpRatio is 1..128
# (aclnnSparseLightningIndexerKLLossGrad.md, aclnnLightningIndexerV2.md).
_CMP_RATIO = AttrSpec("cmp_ratio", IntRange(1, 128), 1,
                      "r, original tokens per compressed key: with sparse_mode 3 query row t sees compressed key j "
                      "iff j < floor((S2 * r + cmp_residual_k[b] - S1 + t + 1) / r) (docs/contract.md section 9.1)")

# The cla_gate kernels use only the vector API common to A2/A3/950 and size tiles from the UB: the
# seed op's own target, Ascend 950, too.
_CLA_SOCS = ("ascend910b", "ascend910_93", "ascend950")
_SPECS = (
    OpSpec("rope", "Rope", ("q", "k", "cos", "sin", "q_seq_len"), ("q_embed", "k_embed"),
           dtypes=_ROPE_DTYPES, ascend_dtypes=_ROPE_ASCEND, cell="RotaryEmbedding"),
    OpSpec("rope_grad", "RopeGrad", ("q_grad", "k_grad", "cos", "sin", "q_seq_len"),
           ("q_grad_out", "k_grad_out"),
           (AttrSpec("mode", Choice(("atb", "vjp")), "atb",
                     "atb: ATB's RopeGradOperation bit for bit; vjp: the exact gradient of rope "
                     "(docs/contract.md section 1)"),),
           _ROPE_DTYPES, _ROPE_ASCEND),
    OpSpec("cla_gate_merge", "ClaGateMerge",
           ("global_attn", "local_attn", "global_gate_logits", "local_gate_logits"), ("merged",),
           dtypes=tuple((x,) * 5 for x in FLOATS), ascend_dtypes=tuple((x,) * 5 for x in ASCEND_FLOATS),
           ascend_socs=_CLA_SOCS, cell="ClaGateMerge"),
    OpSpec("cla_gate_backward", "ClaGateBackward",
           ("grad_merged", "global_attn", "local_attn", "global_gate_logits", "local_gate_logits"),
           ("grad_global_attn", "grad_local_attn", "grad_global_gate_logits", "grad_local_gate_logits"),
           (AttrSpec("input_attn_layout", Choice(("TND",)), "TND", "the layout of the attention inputs: TND only"),),
           tuple((x,) * 9 for x in FLOATS), tuple((x,) * 9 for x in ASCEND_FLOATS), ascend_socs=_CLA_SOCS),
    OpSpec("lightning_indexer", "LightningIndexer",
           ("query_index", "key_index", "weights", "actual_seq_lengths_query", "actual_seq_lengths_key",
            "cmp_residual_k"),
           ("sparse_indices", "sparse_values"), (_SPARSE_COUNT, _LAYOUT, _SPARSE_MODE, _CMP_RATIO),
           _LIGHTNING_INDEXER_DTYPES,
           tuple((x, x, w, "int32", "int32", "int32", "int32", "float32") for x, w in _INDEXER_XW_ASCEND),
           frozenset({"actual_seq_lengths_query", "actual_seq_lengths_key", "cmp_residual_k"}),
           size_limits=(_NIDX_ASCEND,), ascend_socs=_ATTN_SOCS, cell="LightningIndexer"),
    OpSpec("lightning_indexer_grad", "LightningIndexerGrad",
           ("query_index", "key_index", "weights", "sparse_indices", "d_values", "actual_seq_lengths_query",
            "actual_seq_lengths_key", "cmp_residual_k"),
           ("d_query_index", "d_key_index", "d_weights"), (_LAYOUT, _SPARSE_MODE, _CMP_RATIO),
           dtypes=tuple((x, x, w, "int32", "float32", lq, lk, lr, x, x, w) for x, w in _INDEXER_XW for lq in INTS
                        for lk in INTS for lr in INTS),
           ascend_dtypes=tuple((x, x, w, "int32", "float32", "int32", "int32", "int32", x, x, w)
                               for x, w in _INDEXER_XW_ASCEND),
           optional=frozenset({"actual_seq_lengths_query", "actual_seq_lengths_key", "cmp_residual_k"}),
           size_limits=(_NIDX_ASCEND, _K_ASCEND)),
    OpSpec("sparse_lightning_indexer_grad_kl_loss", "SparseLightningIndexerGradKLLoss",
           ("query", "key", "query_index", "key_index", "weights", "sparse_indices", "softmax_max", "softmax_sum",
            "query_rope", "key_rope", "actual_seq_lengths_query", "actual_seq_lengths_key", "sinks", "cmp_residual_k"),
           ("d_query_index", "d_key_index", "d_weights", "loss"),
           (_SCALE_VALUE, _LAYOUT, _SPARSE_MODE, _DETERMINISTIC, _CMP_RATIO), _INDEXER_GRAD_DTYPES,
           tuple((x, x, x, x, w, "int32", "float32", "float32", x, x, "int32", "int32", "float32", "int32", x, x, w,
                  "float32") for x, w in _INDEXER_XW_ASCEND),
           frozenset({"query_rope", "key_rope", "actual_seq_lengths_query", "actual_seq_lengths_key", "sinks",
                      "cmp_residual_k"}),
           size_limits=(_NIDX_ASCEND, _K_ASCEND,
                        ("Ascend", SizeLimit("N1", "attention heads, query dim -2", 1, 256))),
           ascend_socs=_ATTN_SOCS, cell="IndexerKLLoss"),
    # The dense pair: lightning_indexer's logits over each full visible row (no top-k, no indices).
    OpSpec("dense_lightning_indexer_softmax_lse", "DenseLightningIndexerSoftmaxLse",
           ("query_index", "key_index", "weights", "actual_seq_lengths_query", "actual_seq_lengths_key",
            "cmp_residual_k"),
           _DENSE_STATS, (_LAYOUT, _SPARSE_MODE_CAUSAL_ASCEND, _CMP_RATIO),
           tuple((x, x, w, lq, lk, lr, "float32", "float32") for x, w in _INDEXER_XW for lq in INTS for lk in INTS
                 for lr in INTS),
           ascend_dtypes=tuple((x, x, w, "int32", "int32", "int32", "float32", "float32")
                               for x, w in _INDEXER_XW_ASCEND),
           optional=frozenset({"actual_seq_lengths_query", "actual_seq_lengths_key", "cmp_residual_k"}),
           size_limits=(_NIDX_ASCEND,),
           ascend_socs=_ATTN_SOCS),
    OpSpec("dense_lightning_indexer_grad_kl_loss", "DenseLightningIndexerGradKLLoss",
           ("query", "key", "query_index", "key_index", "weights", "softmax_max", "softmax_sum", *_DENSE_STATS,
            "query_rope", "key_rope", "actual_seq_lengths_query", "actual_seq_lengths_key", "cmp_residual_k"),
           ("d_query_index", "d_key_index", "d_weights", "loss"),
           (_SCALE_VALUE, _LAYOUT, _SPARSE_MODE_CAUSAL_ASCEND, _DETERMINISTIC, _CMP_RATIO),
           tuple((x, x, x, x, w, "float32", "float32", "float32", "float32", x, x, lq, lk, lr, x, x, w, "float32")
                 for x, w in _INDEXER_XW for lq in INTS for lk in INTS for lr in INTS),
           ascend_dtypes=tuple((x, x, x, x, w, "float32", "float32", "float32", "float32", x, x, "int32", "int32",
                                "int32", x, x, w, "float32") for x, w in _INDEXER_XW_ASCEND),
           optional=frozenset({"query_rope", "key_rope", "actual_seq_lengths_query", "actual_seq_lengths_key",
                               "cmp_residual_k"}),
           size_limits=(_NIDX_ASCEND, _N1_ASCEND), ascend_socs=_A2_A3, cell="DenseIndexerKLLoss"),
)

# sparse_flash_attention(_grad): one float dtype for all float tensors, int32 indices, float32
# statistics, sinks and d_sinks, int32/int64 lengths. value, the rope pair, the lengths and sinks are
# optional: an absent one is the zero-size placeholder of ms_grad_ops/_optional.py (in the slot's
# dtype), and so is its gradient. sinks is the last input everywhere (CANN's V2 ops insert it earlier):
# appending keeps every positional call of the V1 signatures valid.
_SFA_ATTRS = (_SCALE_VALUE,
              AttrSpec("sparse_block_size", IntRange(1, INT32_MAX), 1,
                       "bs, the keys one index selects (docs/contract.md section 0.5)",
                       (("Ascend", IntRange(1, 64)),)),
              _LAYOUT, _SPARSE_MODE)
_SFA_GRAD_ATTRS = (*_SFA_ATTRS,
                   AttrSpec("pre_tokens", _UNBOUNDED, INT32_MAX, "CANN's token band: unbounded only here (sparse "
                            "modes 0 and 3 take none)"),
                   AttrSpec("next_tokens", _UNBOUNDED, INT32_MAX, "as pre_tokens"), _DETERMINISTIC)
_F32 = "float32"
_SFA_OPTIONAL = frozenset({"value", "query_rope", "key_rope", "actual_seq_lengths_query", "actual_seq_lengths_kv",
                           "sinks"})
_SFA_SPECS = (
    OpSpec("sparse_flash_attention", "SparseFlashAttention",
           ("query", "key", "value", "sparse_indices", "query_rope", "key_rope", "actual_seq_lengths_query",
            "actual_seq_lengths_kv", "sinks"), ("out", "softmax_max", "softmax_sum"), _SFA_ATTRS,
           tuple((x, x, x, "int32", x, x, i, j, _F32, x, _F32, _F32) for x in FLOATS for i in INTS for j in INTS),
           tuple((x, x, x, "int32", x, x, i, i, _F32, x, _F32, _F32) for i in INTS for x in ASCEND_FLOATS),
           _SFA_OPTIONAL, ascend_socs=_ATTN_SOCS, cell="SparseFlashAttention"),
    OpSpec("sparse_flash_attention_grad", "SparseFlashAttentionGrad",
           ("query", "key", "value", "sparse_indices", "d_out", "out", "softmax_max", "softmax_sum",
            "actual_seq_lengths_query", "actual_seq_lengths_kv", "query_rope", "key_rope", "sinks"),
           ("d_query", "d_key", "d_value", "d_query_rope", "d_key_rope", "d_sinks"), _SFA_GRAD_ATTRS,
           tuple((x, x, x, "int32", x, x, _F32, _F32, i, j, x, x, _F32) + (x,) * 5 + (_F32,)
                 for x in FLOATS for i in INTS for j in INTS),
           tuple((x, x, x, "int32", x, x, _F32, _F32, i, i, x, x, _F32) + (x,) * 5 + (_F32,)
                 for i in INTS for x in ASCEND_FLOATS),
           _SFA_OPTIONAL, ascend_socs=_ATTN_SOCS),
)

# sparse_flash_mla(_grad): DeepSeek-V4's attention (CANN's SparseFlashMla / SparseFlashMlaGrad): one shared-KV
# (key is value) softmax with a sink over two key sources, the original tokens (`ori_kv`, a band by default) and
# the compressed entries (`cmp_kv`: none, every causally complete one, or the indexer's top-k). Inputs and
# attributes are CANN's (the aclnn names in snake_case and their order; the paged-KV block tables, the reserved
# topk lengths and the metadata are left out). Lengths are CANN's: cu_seqlens_* cumulative with the leading 0
# (B + 1, TND), seqused_* per batch (B). Both have Ascend C kernels (16-bit floats like CANN's, int32 indices and
# lengths, float32 sinks, softmax_lse and L1 norms) on CANN's SoCs for them (_ATTN_SOCS: sparse_flash_mla_def.cpp
# @3a280bcc3 registers ascend910b, ascend910_93 and ascend950; aclnnSparseFlashMlaGrad.md @220f7dcc lists Atlas
# A2, A3 and Ascend 950PR/950DT for the grad, whose sparse_flash_mla_grad_def.cpp @85809c81 registers A2/A3 only).
# The Ascend limits below are CANN's A2/A3 product limits, stated once for every SoC: Ascend 950's own (N1 2..128,
# ori_mask_mode 0/3/4, cmp_mask_mode 0/3, any windows; docs/ops/sparse_flash_mla.md) are wider, and our kernels
# take the A2/A3 domain on 950 too (the narrower statement holds on every SoC; the table has no per-SoC limit).
_SMLA_LENGTHS = ("cu_seqlens_q", "cu_seqlens_ori_kv", "cu_seqlens_cmp_kv", "seqused_q", "seqused_ori_kv",
                 "seqused_cmp_kv", "cmp_residual_kv")
_SMLA_SOURCES = ("ori_kv", "cmp_kv", "ori_sparse_indices", "cmp_sparse_indices", *_SMLA_LENGTHS, "sinks")
_SMLA_OPTIONAL = frozenset(_SMLA_SOURCES) - {"ori_kv"}
_SMLA_ATTRS = (
    AttrSpec("softmax_scale", FloatRange(), 1.0, "the scale of the logits (1/sqrt(D) in DeepSeek-V4); not the sink's"),
    AttrSpec("cmp_ratio", IntRange(1, 128), 1,
             "tokens per compressed entry: 1 (SWA), 4 (CSA), 128 (HCA) in DeepSeek-V4, the only values CANN's A2/A3 "
             "kernels take (950: 1..128); the compressed causal rule (docs/contract.md section 8)"),
    AttrSpec("ori_mask_mode", Choice((0, 3, 4), ("no mask", "rightDownCausal", "band")), 4,
             "the mask of the original tokens (docs/contract.md section 8)", (("Ascend", Choice((4,), ("band",))),)),
    AttrSpec("cmp_mask_mode", Choice((0, 3), ("no mask", "rightDownCausal")), 3,
             "the mask of the compressed entries (docs/contract.md section 8)",
             (("Ascend", Choice((3,), ("rightDownCausal",))),)),
    AttrSpec("ori_win_left", IntRange(-1, INT32_MAX), 127,
             "band mode: original tokens seen before the diagonal (-1: unbounded)", (("Ascend", IntRange(127, 127)),)),
    AttrSpec("ori_win_right", IntRange(-1, INT32_MAX), 0,
             "band mode: original tokens seen after the diagonal (-1: unbounded)", (("Ascend", IntRange(0, 0)),)),
    _LAYOUT)
_SMLA_SIZES = (("Ascend", SizeLimit("N2", "KV heads, ori_kv dim -2", 1, 1)),
               ("Ascend", SizeLimit("D", "head size, query dim -1", 512, 512)),
               ("Ascend", SizeLimit("N1", "query heads (a power of 2), query dim -2", 1, 128)),
               ("Ascend", SizeLimit("K", "slots of cmp_sparse_indices (512 or 1024), its last dim", 512, 1024)))
_I32 = "int32"
_SMLA_SPECS = (
    OpSpec("sparse_flash_mla", "SparseFlashMla", ("query", *_SMLA_SOURCES), ("attn_out", "softmax_lse"),
           _SMLA_ATTRS, tuple((x, x, x, _I32, _I32, *(_I32,) * 7, _F32, x, _F32) for x in FLOATS),
           tuple((x, x, x, _I32, _I32, *(_I32,) * 7, _F32, x, _F32) for x in ASCEND_FLOATS),
           optional=_SMLA_OPTIONAL, ascend_socs=_ATTN_SOCS, size_limits=_SMLA_SIZES),
    OpSpec("sparse_flash_mla_grad", "SparseFlashMlaGrad", ("query", "d_out", "out", "softmax_lse", *_SMLA_SOURCES),
           ("d_query", "d_ori_kv", "d_cmp_kv", "d_sinks", "ori_softmax_l1_norm", "cmp_softmax_l1_norm"),
           _SMLA_ATTRS,
           tuple((x, x, x, _F32, x, x, _I32, _I32, *(_I32,) * 7, _F32, x, x, x, _F32, _F32, _F32) for x in FLOATS),
           ascend_dtypes=tuple((x, x, x, _F32, x, x, _I32, _I32, *(_I32,) * 7, _F32, x, x, x, _F32, _F32, _F32)
                               for x in ASCEND_FLOATS),
           optional=_SMLA_OPTIONAL, ascend_socs=_ATTN_SOCS, size_limits=_SMLA_SIZES),
)

# CANN's SparseLightningIndexerKLLossGrad (A2/A3 and 950) limits N2 = 1 (the shape rule's), Didx = 128, weights to
# float32, Nidx to {8, 16, 32, 64} and K to 512..8192 on A2/A3 (950: Nidx 1..128, K 1..2048), B to 256 and S1/S2.
# Our Ascend kernel (lightning_indexer_grad's with dI computed) takes more, so only its own bounds are stated, as
# for the other indexer ops: Nidx and K as lightning_indexer_grad's; its tiling refuses a K whose per-token UB
# vectors do not fit (docs/ops/sparse_lightning_indexer_kl_loss_grad.md).
_V4_SPECS = (
    OpSpec("sparse_lightning_indexer_kl_loss_grad", "SparseLightningIndexerKLLossGrad",
           ("query_index", "key_index", "weights", "sparse_indices", "attn_softmax_l1_norm", "actual_seq_lengths_query",
            "actual_seq_lengths_key", "cmp_residual_k"),
           ("d_query_index", "d_key_index", "d_weights", "softmax_out", "loss"), (_LAYOUT, _SPARSE_MODE, _CMP_RATIO),
           tuple((x, x, w, "int32", _F32, lq, lk, lr, x, x, w, _F32, _F32)
                 for x, w in _INDEXER_XW for lq in INTS for lk in INTS for lr in INTS),
           ascend_dtypes=tuple((x, x, w, "int32", _F32, "int32", "int32", "int32", x, x, w, _F32, _F32)
                               for x, w in _INDEXER_XW_ASCEND),
           optional=frozenset({"actual_seq_lengths_query", "actual_seq_lengths_key", "cmp_residual_k"}),
           size_limits=(_NIDX_ASCEND, _K_ASCEND), ascend_socs=_ATTN_SOCS),
)

OP_SPECS: dict[str, OpSpec] = {spec.name: spec for spec in (*_SPECS, *_SFA_SPECS, *_SMLA_SPECS, *_V4_SPECS)}


# ---------------------------------------------------------------- the forward/grad pairing
# The model is PyTorch's derivatives.yaml: for each differentiable forward op, the grad op that is
# its backward, where each grad input comes from and which grad output is the gradient of which
# forward input. scripts/glue/bprops.py generates the bprops (ms_grad_ops/_bprop_table.py) from it.

@dataclass(frozen=True)
class GradSpec:
    """The backward of forward op ``forward``: one call of its fused grad op ``grad``."""

    forward: str
    grad: str
    inputs: tuple[str, ...]
    """One source per input of ``grad``, in its order: a forward input by name, ``result.<output>``
    (a forward output) or ``grad.<output>`` (the incoming gradient of a forward output)."""
    gradients: dict[str, str]
    """{forward input: the grad output that is its gradient}. Every other forward input (indices,
    lengths, tables) gets zeros; every grad output is the gradient of one forward input."""
    copied_attrs: tuple[str, ...] = ()
    """Grad attributes that take the value of the forward attribute of the same name."""
    fixed_attrs: dict[str, object] = field(default_factory=dict)
    """Grad attributes with a fixed value. The grad's other attributes keep their defaults."""
    note: str = ""
    """Why the wiring is as it is (the generated bprop's docstring)."""
    by_products: tuple[str, ...] = ()
    """Grad outputs that are no gradient (statistics the backward also returns): the bprop drops them."""


_SFA_FORWARD_ATTRS = tuple(a.name for a in _SFA_ATTRS)

DERIVATIVES: dict[str, GradSpec] = {d.forward: d for d in (
    GradSpec("rope", "rope_grad", ("grad.q_embed", "grad.k_embed", "cos", "sin", "q_seq_len"),
             {"q": "q_grad_out", "k": "k_grad_out"}, fixed_attrs={"mode": "vjp"},
             note="The exact VJP of rope (mode vjp); cos, sin and the lengths are tables."),
    GradSpec("cla_gate_merge", "cla_gate_backward",
             ("grad.merged", "global_attn", "local_attn", "global_gate_logits", "local_gate_logits"),
             {"global_attn": "grad_global_attn", "local_attn": "grad_local_attn",
              "global_gate_logits": "grad_global_gate_logits", "local_gate_logits": "grad_local_gate_logits"},
             fixed_attrs={"input_attn_layout": "TND"}),
    GradSpec("sparse_flash_attention", "sparse_flash_attention_grad",
             ("query", "key", "value", "sparse_indices", "grad.out", "result.out", "result.softmax_max",
              "result.softmax_sum", "actual_seq_lengths_query", "actual_seq_lengths_kv", "query_rope", "key_rope",
              "sinks"),
             {"query": "d_query", "key": "d_key", "value": "d_value", "query_rope": "d_query_rope",
              "key_rope": "d_key_rope", "sinks": "d_sinks"}, copied_attrs=_SFA_FORWARD_ATTRS,
             note="The statistics carry no gradient. An absent value/rope/sinks input gets its absent (zero-size) "
                  "gradient; with value absent d_key is the fused dK + dV."),
    GradSpec("sparse_flash_mla", "sparse_flash_mla_grad",
             ("query", "grad.attn_out", "result.attn_out", "result.softmax_lse", *_SMLA_SOURCES),
             {"query": "d_query", "ori_kv": "d_ori_kv", "cmp_kv": "d_cmp_kv", "sinks": "d_sinks"},
             copied_attrs=tuple(a.name for a in _SMLA_ATTRS),
             note="softmax_lse carries no gradient; an absent cmp_kv/sinks gets its absent gradient. The softmax "
                  "L1 norms (the indexer's target) are by-products the bprop drops.",
             by_products=("ori_softmax_l1_norm", "cmp_softmax_l1_norm")),
    GradSpec("lightning_indexer", "lightning_indexer_grad",
             ("query_index", "key_index", "weights", "result.sparse_indices", "grad.sparse_values",
              "actual_seq_lengths_query", "actual_seq_lengths_key", "cmp_residual_k"),
             {"query_index": "d_query_index", "key_index": "d_key_index", "weights": "d_weights"},
             copied_attrs=("layout", "sparse_mode", "cmp_ratio"),
             note="Only the values carry a gradient; the selected indices say which keys it flows to. -1 slots "
                  "are skipped by the kernel, so their -inf values never matter."),
)}

BACKWARD_OP = "it is a backward op itself; differentiate the forward op or its nn Cell instead"
"""Why a grad op of ``DERIVATIVES`` has no gradient of its own."""

NO_GRADIENT: dict[str, str] = {
    "sparse_lightning_indexer_grad_kl_loss": "it returns the loss together with its gradients; use "
                                             "nn.IndexerKLLoss, whose backward scales them by the incoming gradient",
    "dense_lightning_indexer_softmax_lse": "its statistics are the fixed normaliser of the indexer distribution "
                                           "that dense_lightning_indexer_grad_kl_loss differentiates through",
    "sparse_lightning_indexer_kl_loss_grad": "it is the backward of the indexer's KL loss against a given target "
                                             "(its gradients for d(loss) = 1, the loss only to log); scale them "
                                             "by the incoming gradient yourself",
    "dense_lightning_indexer_grad_kl_loss": "it returns the loss together with its gradients; use "
                                            "nn.DenseIndexerKLLoss, whose backward scales them by the incoming "
                                            "gradient",
}
"""Why each op that is neither a forward of ``DERIVATIVES`` nor a grad op has no gradient."""


def no_gradient_reason(name: str) -> str | None:
    """Why op ``name`` has no gradient, or None for a differentiable forward op."""
    if name in DERIVATIVES:
        return None
    if name in NO_GRADIENT:
        return NO_GRADIENT[name]
    if any(d.grad == name for d in DERIVATIVES.values()):
        return BACKWARD_OP
    raise KeyError(f"{name}: neither in DERIVATIVES nor a grad op nor in NO_GRADIENT")


def _check_attrs() -> None:
    """Every default is inside its domain and every limit inside the domain it narrows; attributes
    of one name have one domain in every op (they share one C++ enum, one docs wording)."""
    seen: dict[str, AttrSpec] = {}
    for op in OP_SPECS.values():
        for a in op.attrs:
            if not a.required and a.error(op.name, a.default, None):
                raise ValueError(f"{op.name}.{a.name}: default {a.default!r} outside {a.domain.text}")
            if any(b not in BACKENDS or type(d) is not type(a.domain) for b, d in a.limits):
                raise ValueError(f"{op.name}.{a.name}: limits must name a backend of {BACKENDS}, same kind of domain")
            if seen.setdefault(a.name, a).domain != a.domain:
                raise ValueError(f"{op.name}.{a.name}: another op has an attribute of this name with another domain")


def _check_derivatives() -> None:
    """The pairing names only what the table has (a typo fails at import, here and in the generators)."""
    for d in DERIVATIVES.values():
        fwd, grad = OP_SPECS[d.forward], OP_SPECS[d.grad]
        where = f"DERIVATIVES[{d.forward!r}]"
        if len(d.inputs) != len(grad.inputs):
            raise ValueError(f"{where}: {len(d.inputs)} sources for the {len(grad.inputs)} inputs of {d.grad}")
        for source in d.inputs:
            kind, _, name = source.rpartition(".")
            if (kind and (kind not in ("result", "grad") or name not in fwd.outputs)) or \
                    (not kind and name not in fwd.inputs):
                raise ValueError(f"{where}: {source!r} is no forward input, result.<output> or grad.<output>")
        if not set(d.gradients) <= set(fwd.inputs) or \
                sorted((*d.gradients.values(), *d.by_products)) != sorted(grad.outputs):
            raise ValueError(f"{where}: gradients and by_products must name every output of {d.grad} once")
        grad_attrs = {a.name: a.type for a in grad.attrs}
        fwd_attrs = {a.name: a.type for a in fwd.attrs}
        for name in d.copied_attrs:
            if grad_attrs.get(name) is None or grad_attrs[name] != fwd_attrs.get(name):
                raise ValueError(f"{where}: attribute {name!r} is not in both ops with one type")
        if not set(d.fixed_attrs) <= set(grad_attrs) or set(d.fixed_attrs) & set(d.copied_attrs):
            raise ValueError(f"{where}: fixed attributes must be attributes of {d.grad}, not also copied")
        unset = [a.name for a in grad.attrs if a.required and a.name not in (*d.copied_attrs, *d.fixed_attrs)]
        if unset:
            raise ValueError(f"{where}: the required attributes {unset} of {d.grad} are neither copied nor fixed")
    for name in OP_SPECS:
        no_gradient_reason(name)


_check_attrs()
_check_derivatives()
