"""nn-level primitives: forward op + our fused backward kernel as bprop."""
from .cla_gate_merge import ClaGateMerge
from .context_parallel import ContextParallelDSAttention
from .cp_plan import ContextParallelPlan
from .dense_indexer_kl_loss import DenseIndexerKLLoss
from .ds_attention import DSAttention
from .indexer_kl_loss import IndexerKLLoss
from .lightning_indexer import LightningIndexer
from .rotary_embedding import RotaryEmbedding
from .sparse_flash_attention import SparseFlashAttention

__all__ = ["ClaGateMerge", "ContextParallelDSAttention", "ContextParallelPlan", "DenseIndexerKLLoss", "DSAttention",
           "IndexerKLLoss",
           "LightningIndexer", "RotaryEmbedding", "SparseFlashAttention"]
