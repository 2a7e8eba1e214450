"""The forwards of the element-wise ops built from plain ``mindspore.ops``.

MindSpore autodiff of these is what a user would run without this package: the tests check our
fused backward against it, the demo checks a whole network's gradient with it, and the
benchmarks time it as the baseline. float32 (built-in bfloat16 ops mostly fail on CPU).
"""
from __future__ import annotations

from mindspore import Tensor, nn
from mindspore import ops as msops

HEAD = 128


def _rotate_half(x: Tensor) -> Tensor:
    return msops.concat([-x[..., HEAD // 2:], x[..., :HEAD // 2]], axis=-1)


class CompositeRope(nn.Cell):
    """``construct(q, k, cos, sin, positions) -> (q_embed, k_embed)``: like ``ops.rope`` but with
    the per-token position (int32 ``[n_tokens]``) instead of the sequence lengths."""

    def construct(self, q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        c = msops.gather(cos, positions, 0).expand_dims(1)
        s = msops.gather(sin, positions, 0).expand_dims(1)
        t = q.shape[0]
        qh, kh = q.reshape(t, -1, HEAD), k.reshape(t, -1, HEAD)
        return ((qh * c + _rotate_half(qh) * s).reshape(t, -1), (kh * c + _rotate_half(kh) * s).reshape(t, -1))


class CompositeClaGateMerge(nn.Cell):
    """``construct(global_attn, local_attn, global_gate_logits, local_gate_logits) -> merged``."""

    def construct(self, og: Tensor, ol: Tensor, zg: Tensor, zl: Tensor) -> Tensor:
        return msops.sigmoid(zg).expand_dims(-1) * og + msops.sigmoid(zl).expand_dims(-1) * ol
