"""Float64 NumPy forward and backward of every op: the oracle all backends are tested against.

Pure NumPy (no MindSpore import), so kernel harnesses can use it directly.
"""
from .cla_gate import cla_gate_backward, cla_gate_merge
from .rope import rope, rope_grad
from .sparse_flash_attention import sparse_flash_attention, sparse_flash_attention_grad

__all__ = ["cla_gate_backward", "cla_gate_merge", "rope", "rope_grad", "sparse_flash_attention",
           "sparse_flash_attention_grad"]
