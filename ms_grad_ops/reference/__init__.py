"""Float64 NumPy forward and backward of every op: the oracle all backends are tested against.

Pure NumPy (no MindSpore import), so kernel harnesses can use it directly.
"""
from .cla_gate import cla_gate_backward, cla_gate_merge
from .dense_lightning_indexer import (
    dense_attention_softmax_stats,
    dense_lightning_indexer_grad_kl_loss,
    dense_lightning_indexer_softmax_lse,
)
from .lightning_indexer import (
    attention_softmax_stats,
    indexer_kl_loss,
    lightning_indexer,
    lightning_indexer_grad,
    sparse_lightning_indexer_grad_kl_loss,
)
from .rope import rope, rope_grad
from .sparse_flash_attention import sparse_flash_attention, sparse_flash_attention_grad
from .sparse_flash_mla import sparse_flash_mla, sparse_flash_mla_grad
from .sparse_lightning_indexer_kl_loss_grad import sparse_lightning_indexer_kl_loss_grad

__all__ = ["attention_softmax_stats", "cla_gate_backward", "cla_gate_merge", "dense_attention_softmax_stats",
           "dense_lightning_indexer_grad_kl_loss", "dense_lightning_indexer_softmax_lse", "indexer_kl_loss",
           "lightning_indexer",
           "lightning_indexer_grad", "rope", "rope_grad", "sparse_flash_attention", "sparse_flash_attention_grad",
           "sparse_flash_mla", "sparse_flash_mla_grad",
           "sparse_lightning_indexer_grad_kl_loss", "sparse_lightning_indexer_kl_loss_grad"]
