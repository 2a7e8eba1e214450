"""``nn.DSAttention`` in BSND with per-batch ``actual_seq_lengths`` (docs/contract.md section 0.3): a
padded batch (a row of 4 real tokens of S = 7, a full one, an empty one) computes what the packed
tokens compute, checked against the float64 oracle of the packed tokens; the padding tokens get
``out`` 0, add nothing to the loss and get zero input gradients, whatever their values."""
from __future__ import annotations

import _dsa_oracle as oracle
import mindspore as ms
import numpy as np
import pytest
from _util import MS_DTYPES, TOLERANCES, quantize, rel_l2
from mindspore import Tensor, nn

import ms_grad_ops as mgo

CFG = {"dim": 20, "n_heads": 2, "q_lora_rank": 12, "kv_lora_rank": 10, "qk_nope_head_dim": 6,
       "qk_rope_head_dim": 4, "v_head_dim": 5, "index_n_heads": 3, "index_head_dim": 8, "index_topk": 3,
       "rope_theta": 10000.0, "eps": 1e-6}
INDEXER = ("wq_idx.", "wk_idx.", "k_norm.", "weights_proj.")
B, S, LENS = 3, 7, [4, 7, 0]


class _Objective(nn.Cell):
    """``sum(out * d_out) + indexer_loss``."""

    def __init__(self, layer: nn.Cell, d_out: Tensor) -> None:
        super().__init__()
        self.layer, self.d_out = layer, d_out

    def construct(self, x: Tensor, lengths: Tensor) -> Tensor:
        out, loss = self.layer(x, lengths)
        return (out * self.d_out).sum() + loss.sum()


def _short(name: str) -> str:
    """The parameter's name inside DSAttention (the wrapper Cell prefixes it with "layer.")."""
    return name[len("layer."):] if name.startswith("layer.") else name


# GRAPH in float16: a BSND DSAttention in GRAPH mode with bfloat16 kernels fails to compile on CPU
# whatever the lengths (a bfloat16 Reshape, issue 26).
@pytest.mark.parametrize(("mode", "dtype"), [("pynative", "float32"), ("pynative", "bfloat16"), ("graph", "float16")])
def test_padded_batch_matches_the_packed_tokens(mode: str, dtype: str) -> None:
    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    try:
        _check(dtype)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def _check(dtype: str) -> None:
    rng = np.random.default_rng(9)
    ms.set_seed(1)
    layer = mgo.nn.DSAttention(**CFG, max_seq_len=16, layout="BSND", dtype=MS_DTYPES[dtype])
    x = rng.standard_normal((B, S, CFG["dim"]))
    d_out = rng.standard_normal(x.shape)
    valid = np.concatenate([b * S + np.arange(n) for b, n in enumerate(LENS)])
    lengths = Tensor(np.array(LENS, np.int32))
    params = layer.trainable_params()
    objective = _Objective(layer, Tensor(d_out.astype(np.float32)))
    xt = Tensor(x.astype(np.float32))
    grads = ms.grad(objective, 0, params)(xt, lengths)
    out, loss = layer(xt, lengths)
    out = out.asnumpy().reshape(B * S, -1)
    selected = layer.select(xt, lengths).asnumpy().reshape(B * S, -1)
    pad = np.setdiff1d(np.arange(B * S), valid)
    assert (out[pad] == 0).all(), "padding tokens' output"
    assert (grads[0].asnumpy().reshape(B * S, -1)[pad] == 0).all(), "padding tokens' input gradient"
    assert (selected[pad] == -1).all()

    seq, pos = oracle.tokens("TND", np.cumsum([n for n in LENS if n]).tolist())
    values = {_short(p.name): p.asnumpy().astype(np.float64) for p in params}
    cfg = {**CFG, "scale": (CFG["qk_nope_head_dim"] + CFG["qk_rope_head_dim"]) ** -0.5}
    ref_out, ref_loss, main_terms, kl_terms = oracle.gradient_terms(
        values, x.reshape(B * S, -1)[valid], seq, pos, selected[valid], cfg, d_out.reshape(B * S, -1)[valid],
        lambda a: quantize(a, dtype))
    tol = TOLERANCES["attention"][dtype]
    assert rel_l2(out[valid], ref_out) <= tol
    assert abs(float(loss.asnumpy()[0]) - ref_loss) <= tol * abs(ref_loss) + 1e-6
    for p, g in zip(params, grads[1]):
        name = _short(p.name)
        terms = kl_terms[name] if name.startswith(INDEXER) else main_terms[name]
        err = rel_l2(g.asnumpy(), terms.sum(0), oracle.term_magnitude(terms))
        assert err <= tol, f"{p.name}: relative L2 error {err:.3g} > {tol:g} ({dtype})"
