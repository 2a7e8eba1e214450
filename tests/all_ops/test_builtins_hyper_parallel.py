"""ms_grad_ops.builtins' hyper-parallel names for the dense warm-up pair (``npu_dense_lightning_indexer_softmax_lse``,
``npu_dense_lightning_indexer_grad_kl_loss``): hyper-parallel's signatures, called as MindSpore Transformers'
``DSAIndexerLoss`` calls them (CANN's MHA statistics ``(B, N1, S1, 1)`` / ``(N1, T1, 1)``, TND lengths as int32
tensors, the loss divided by the token count), against the float64 reference; CANN's per-head statistics with a
one-head key; the arguments CPU cannot honour."""
from __future__ import annotations

import inspect

import numpy as np
import pytest
from _dense_indexer_cases import make_dense_case, ms_grad_args, ms_lse_args
from _util import assert_close, to_np
from mindspore import Tensor, nn

from ms_grad_ops import builtins
from ms_grad_ops import reference as ref

_MAX = 2**63 - 1
# hyper-parallel's hyper_parallel/custom_ops/experimental/experimental_ops.py @009e7956 (not on PyPI).
HYPER_PARALLEL = {
    "npu_dense_lightning_indexer_softmax_lse": (
        "(query_index, key_index, weights, *, actual_seq_qlen=None, actual_seq_klen=None, layout='BSND', "
        f"sparse_mode=3, pre_tokens={_MAX}, next_tokens={_MAX})"),
    "npu_dense_lightning_indexer_grad_kl_loss": (
        "(query, key, query_index, key_index, weights, softmax_max, softmax_sum, softmax_max_index, "
        "softmax_sum_index, scale_value, *, query_rope=None, key_rope=None, actual_seq_qlen=None, "
        f"actual_seq_klen=None, layout='BSND', sparse_mode=3, pre_tokens={_MAX}, next_tokens={_MAX})"),
}


def _plain(sig: inspect.Signature) -> str:
    return str(sig.replace(parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
                           return_annotation=inspect.Signature.empty))


@pytest.mark.parametrize("name", sorted(HYPER_PARALLEL))
def test_signature_equals_hyper_parallel(name: str) -> None:
    assert _plain(inspect.signature(getattr(builtins, name))) == HYPER_PARALLEL[name]


class _MindformersDenseLoss(nn.Cell):
    """The dense branch of mindformers' ``DSAIndexerLoss``: the fused loss through the hyper-parallel names,
    divided by the token count."""

    def __init__(self, scale: float, layout: str) -> None:
        super().__init__()
        self.scale, self.layout = scale, layout

    def construct(self, q, k, qi, ki, w, smax, ssum, q_rope, k_rope, seq_q, seq_k):  # noqa: ANN001, ANN201
        mxi, smi = builtins.npu_dense_lightning_indexer_softmax_lse(qi, ki, w, actual_seq_qlen=seq_q,
                                                                    actual_seq_klen=seq_k, layout=self.layout)
        _, _, _, loss = builtins.npu_dense_lightning_indexer_grad_kl_loss(
            q, k, qi, ki, w, smax, ssum, mxi, smi, self.scale, query_rope=q_rope, key_rope=k_rope,
            actual_seq_qlen=seq_q, actual_seq_klen=seq_k, layout=self.layout)
        tokens = q.shape[0] if self.layout == "TND" else q.shape[0] * q.shape[1]
        return loss[0] / tokens, mxi, smi


@pytest.mark.parametrize("layout", ["TND", "BSND"])
def test_called_as_mindformers_does(exec_mode: str, layout: str) -> None:
    """CANN's MHA main attention (N2 = N1): its statistics (B, N1, S1, 1) / (N1, T1, 1) are this package's."""
    case = make_dense_case(np.random.default_rng(41), "bfloat16", "float32", layout, n1=4, n2=4, d=16, dr=8)
    args = ms_grad_args(case, "bfloat16", "float32")
    assert tuple(args[5].shape) == ((4, 14, 1) if layout == "TND" else (2, 4, 7, 1))
    lens = [None if x is None else Tensor(np.asarray(x, np.int32)) for x in case.lens()]
    net = _MindformersDenseLoss(case.scale, layout)
    loss, mxi, smi = net(*args[:7], args[9], args[10], *lens)
    want_mxi, want_smi = ref.dense_lightning_indexer_softmax_lse(*case.ref_lse_args(), **case.attrs())
    np.testing.assert_allclose(to_np(mxi), want_mxi, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(to_np(smi), want_smi, rtol=1e-4)
    want = ref.dense_lightning_indexer_grad_kl_loss(*case.ref_grad_args(), **case.grad_attrs())[3]
    tokens = args[0].shape[0] if layout == "TND" else args[0].shape[0] * args[0].shape[1]
    assert abs(float(to_np(loss)) - want / tokens) <= 1e-3 * abs(want / tokens)


@pytest.mark.parametrize("layout", ["TND", "BSND"])
def test_cann_per_head_statistics_with_a_one_head_key(layout: str) -> None:
    """MLA-absorbed MQA (key heads 1) given CANN's per-head statistics layout: transposed to this package's."""
    case = make_dense_case(np.random.default_rng(42), "float32", "float32", layout, n1=4, n2=1)
    args = ms_grad_args(case, "float32", "float32")
    ours = [to_np(x) for x in builtins.npu_dense_lightning_indexer_grad_kl_loss(
        *args[:9], case.scale, query_rope=args[9], key_rope=args[10], actual_seq_qlen=case.lens_q,
        actual_seq_klen=case.lens_k, layout=layout)]
    cann = [Tensor(to_np(a).astype(np.float32).transpose(0, 3, 2, 1) if layout == "BSND" else
                   to_np(a).astype(np.float32).transpose(2, 1, 0)) for a in args[5:7]]
    assert cann[0].shape[-1] == 1 and cann[0].shape[1 if layout == "BSND" else 0] == 4
    theirs = [to_np(x) for x in builtins.npu_dense_lightning_indexer_grad_kl_loss(
        *args[:5], *cann, *args[7:9], case.scale, query_rope=args[9], key_rope=args[10],
        actual_seq_qlen=case.lens_q, actual_seq_klen=case.lens_k, layout=layout)]
    want = ref.dense_lightning_indexer_grad_kl_loss(*case.ref_grad_args(), **case.grad_attrs())
    for o, t in zip(ours, theirs):
        np.testing.assert_array_equal(o, t)
    for name, g, w in zip(("d_query_index", "d_key_index", "d_weights"), ours[:3], want[:3]):
        assert_close(g, w, "float32", "attention", name)


@pytest.mark.parametrize("arg", ["pre_tokens", "next_tokens"])
def test_token_band_is_rejected(arg: str) -> None:
    case = make_dense_case(np.random.default_rng(43), "float32", "float32", "TND", lens_q=[3], lens_k=[5])
    qi, ki, w = ms_lse_args(case, "float32", "float32")[:3]
    with pytest.raises(ValueError, match=rf"^dense_lightning_indexer_softmax_lse: argument '{arg}' = 512 is not "
                                         "supported by ms_grad_ops on CPU"):
        builtins.npu_dense_lightning_indexer_softmax_lse(qi, ki, w, layout="TND", **{arg: 512})
    args = ms_grad_args(case, "float32", "float32")
    with pytest.raises(ValueError, match=rf"^dense_lightning_indexer_grad_kl_loss: argument '{arg}' = 0 is not"):
        builtins.npu_dense_lightning_indexer_grad_kl_loss(*args[:9], case.scale, layout="TND", **{arg: 0})
