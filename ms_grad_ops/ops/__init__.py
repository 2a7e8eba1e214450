"""Functional API: validate eagerly, then call the op's ``ops.Custom`` primitive."""
from .cla_gate_backward import cla_gate_backward
from .cla_gate_merge import cla_gate_merge
from .dense_lightning_indexer_grad_kl_loss import dense_lightning_indexer_grad_kl_loss
from .dense_lightning_indexer_softmax_lse import dense_lightning_indexer_softmax_lse
from .lightning_indexer import lightning_indexer
from .lightning_indexer_grad import lightning_indexer_grad
from .rope import rope
from .rope_grad import rope_grad
from .sparse_flash_attention import sparse_flash_attention
from .sparse_flash_attention_grad import sparse_flash_attention_grad
from .sparse_flash_mla import sparse_flash_mla
from .sparse_flash_mla_grad import sparse_flash_mla_grad
from .sparse_lightning_indexer_grad_kl_loss import sparse_lightning_indexer_grad_kl_loss
from .sparse_lightning_indexer_kl_loss_grad import sparse_lightning_indexer_kl_loss_grad

__all__ = ["cla_gate_backward", "cla_gate_merge", "dense_lightning_indexer_grad_kl_loss",
           "dense_lightning_indexer_softmax_lse", "lightning_indexer", "lightning_indexer_grad", "rope", "rope_grad",
           "sparse_flash_attention", "sparse_flash_attention_grad", "sparse_flash_mla", "sparse_flash_mla_grad",
           "sparse_lightning_indexer_grad_kl_loss", "sparse_lightning_indexer_kl_loss_grad"]
