"""The README's quick-start code block runs as written: read from README.md (so it stays true by
construction) and executed after a preamble that defines the tensors it names in the documented
shapes, in PyNative and GRAPH mode (where calling ``attn`` compiles the layer), for both layouts of
its bfloat16 ``DSAttention``. Its results are checked: the ops against the float64 reference, the
layer's outputs for shape, dtype and finiteness, and one gradient step through it."""
from __future__ import annotations

import re

import mindspore as ms
import numpy as np
import pytest
from _paths import ROOT
from _util import assert_close, to_np
from mindspore import Tensor

from ms_grad_ops import reference as ref

LENGTHS = [5, 12]   # TND: two sequences, cumulative (CANN style)


def quick_start_block() -> str:
    """The first python code block under "## Quick start" in README.md."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "README.md: no python block under '## Quick start'"
    return found.group(1)


def _preamble(layout: str, rng: np.random.Generator) -> dict:
    """The names the block uses, in the shapes its comments give (q/k ``[n_tokens, 128 * heads]``
    with the block's ``q_seq_len``, cos/sin ``[max_seq_len, 128]``, CLA tensors ``[T, N, D]`` and
    gates ``[T, N]``, x float32 ``[B, S, dim]`` or ``[T, dim]``)."""
    t = sum([2, 1, 4, 4])
    f = {name: Tensor(rng.standard_normal(shape).astype(np.float32)) for name, shape in
         [("q_grad", (t, 256)), ("k_grad", (t, 256)), ("cos", (4, 128)), ("sin", (4, 128)), ("g", (6, 3, 16)),
          ("o_g", (6, 3, 16)), ("o_l", (6, 3, 16)), ("z_g", (6, 3)), ("z_l", (6, 3))]}
    x = rng.standard_normal((2, 16, 64) if layout == "BSND" else (LENGTHS[-1], 64)).astype(np.float32)
    return {**f, "x": Tensor(x), "actual_seq_lengths": LENGTHS, "task_loss": _task_loss}


def _task_loss(out: Tensor) -> Tensor:
    return (out * out).mean()


def _block_for(layout: str) -> str:
    """The block as written (BSND), or with its layout and call switched to TND as its comment says."""
    block = quick_start_block()
    if layout == "BSND":
        return block
    for old, new in (('layout="BSND"', 'layout="TND"'), ("attn(x)", "attn(x, actual_seq_lengths)")):
        assert block.count(old) == 1, f"README quick start: expected one {old!r}"
        block = block.replace(old, new)
    return block


@pytest.mark.parametrize("layout", ["BSND", "TND"])
def test_readme_quick_start_runs(exec_mode: str, layout: str) -> None:
    namespace = _preamble(layout, np.random.default_rng(3))
    exec(compile(_block_for(layout), "README.md quick start", "exec"), namespace)   # noqa: S102

    f64 = {k: to_np(namespace[k]) for k in ("q_grad", "k_grad", "cos", "sin", "g", "o_g", "o_l", "z_g", "z_l")}
    want = ref.rope_grad(f64["q_grad"], f64["k_grad"], f64["cos"], f64["sin"], [2, 1, 4, 4], mode="atb")
    for got, w in zip((namespace["q_out"], namespace["k_out"]), want):
        assert_close(to_np(got), w, "float32", "elementwise", "rope_grad")
    want = ref.cla_gate_backward(*(f64[k] for k in ("g", "o_g", "o_l", "z_g", "z_l")))
    for got, w in zip(namespace["grads"], want):
        assert_close(to_np(got), w, "float32", "attention", "cla_gate_backward")

    attn, x = namespace["attn"], namespace["x"]
    out, indexer_loss, loss = namespace["out"], namespace["indexer_loss"], namespace["loss"]
    assert attn.dtype == ms.bfloat16 and attn.layout == layout
    assert out.shape == x.shape and out.dtype == ms.float32 and indexer_loss.shape == (1,)
    for value in (out, indexer_loss, loss):
        assert np.isfinite(value.asnumpy()).all()

    # and it trains: the block's loss differentiated with respect to the layer's parameters
    lengths = namespace["actual_seq_lengths"] if layout == "TND" else None

    def objective(x: Tensor) -> Tensor:
        out, indexer_loss = attn(x, lengths)
        return namespace["task_loss"](out) + indexer_loss.sum()
    grads = ms.grad(objective, None, attn.trainable_params())(x)
    assert all(np.isfinite(g.asnumpy()).all() for g in grads)
    assert sum(bool(np.abs(g.asnumpy()).max() > 0) for g in grads) == len(grads)
