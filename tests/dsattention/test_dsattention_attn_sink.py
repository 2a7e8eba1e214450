"""``nn.DSAttention(attn_sink=True)``: DeepSeek-V4's learnable per-head sinks in the sparse attention
and the indexer's KL loss (docs/dsattention.md). One SGD step of the matrix's DSAttention (and its
context-parallel form) with sinks, every parameter's gradient (``attn_sink`` included) against the
float64 oracle with sinks (``_dsa_oracle``), and the sinks under DeepSeek-V4's name in the state dict."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from _cell_matrix import _dsa_case, dsa_layer, train_step

import ms_grad_ops as mgo


@pytest.mark.parametrize("mode,layout,dtype", [("graph", "TND", "float32"), ("pynative", "BSND", "bfloat16"),
                                               ("graph", "BSND", "float16")])
def test_dsattention_learns_attn_sink(mode: str, layout: str, dtype: str) -> None:
    case = _dsa_case(layout, dtype, context_parallel=False, attn_sink=True)
    assert "layer.attn_sink" in [p.name for p in case.net.trainable_params()]
    train_step(case, mode)


def test_context_parallel_dsattention_uses_attn_sink() -> None:
    case = _dsa_case("TND", "float32", context_parallel=True, attn_sink=True)
    assert any(p.name.endswith("attn_sink") for p in case.net.trainable_params())
    train_step(case, "pynative")


def test_attn_sink_in_the_deepseek_state_dict() -> None:
    layer = dsa_layer("TND", "float32", attn_sink=True)
    state = layer.deepseek_state_dict("layers.0.attn.")
    np.testing.assert_array_equal(state["layers.0.attn.attn_sink"], layer.attn_sink.asnumpy())
    other = dsa_layer("TND", "float32", attn_sink=True)
    other.attn_sink.set_data(ms.Tensor(np.zeros(2, np.float32)))
    other.load_deepseek_state_dict(state, "layers.0.attn.")
    np.testing.assert_array_equal(other.attn_sink.asnumpy(), layer.attn_sink.asnumpy())
    plain = dsa_layer("TND", "float32")
    assert plain.attn_sink is None and "attn_sink" not in plain.deepseek_state_dict()
    with pytest.raises(ValueError, match="unexpected tensors.*attn_sink"):
        plain.load_deepseek_state_dict(state, "layers.0.attn.")
    with pytest.raises(TypeError, match="DSAttention: argument 'attn_sink' must be a bool"):
        mgo.nn.DSAttention(20, 2, 12, 10, 6, 4, 5, 3, 8, 3, max_seq_len=16, attn_sink=2)
