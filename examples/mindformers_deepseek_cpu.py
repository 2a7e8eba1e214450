"""A whole DeepSeek-V3.2 model from MindSpore Transformers 2.0.0 trained on CPU, both recipe stages.

The model is mindformers' own entry point, ``DeepseekV3ForCausalLM(DeepseekV3Config(...))`` in GRAPH
mode (its training_graph ``GPTModel``), tiny: 2 layers (the first dense, the second MoE with 4
routed experts, top-2, and 1 shared expert), hidden 64, 4 heads, q/kv LoRA 32, nope/rope/v
16/8/16, DSA with a 4 x 16 lightning indexer and top-k 8, 1 MTP layer, sequences of 32, batches
of 2. It trains with ``ms.value_and_grad`` + ``nn.AdamWeightDecay`` on the loss mindformers'
trainer sums (language model + MTP + MoE auxiliary + indexer KL), through DeepSeek-V3.2's stages:

1. dense warm-up (``dsa_indexer_use_sparse_loss=False``): mindformers freezes everything but the
   lightning indexers, which learn the main attention's distribution (dense KL loss);
2. sparse stage (``dsa_indexer_use_sparse_loss=True``): the model starts from the warm-up's
   parameters; the attention keeps the indexer's top-k keys; everything trains.

``ms_grad_ops.builtins.install()`` is the only thing done about MindSpore's operators: on CPU it
binds this package's kernels to ``ops.sparse_flash_attention``/``ops.lightning_indexer`` and CPU
stand-ins to the primitives MindSpore 2.10 runs only on Ascend (``ms_grad_ops.cpu_gaps``:
RmsNorm, Outer, BatchMatMul's broadcasting, TopkExt, SliceExt, the embedding's backward, and on
the MoE path CumsumExt, SortExt, IndexSelect, FmodScalar, GroupedMatmul, Swiglu). What is left is
mindformers' own setup, done visibly by ``mindformers_2_0_0`` (imports past its unused
dependencies, the DSA size check, its context) and by the config below (``moe_grouped_gemm=True``:
its training graph has no other MoE; ``mtp_loss_factor``: required with MTP). docs/migrating.md
says why each is mindformers', not MindSpore's.

Run: ``PYTHONPATH=<folder with mindformers 2.0.0> python examples/mindformers_deepseek_cpu.py``
(``tests/integration/test_mindformers_dsa.py`` shows how that folder is installed: ``pip install
--no-deps --target`` mindformers==2.0.0 and a few pure-Python packages its modules import).
``--check`` exits non-zero unless, in both stages, every trainable parameter gets a non-zero
gradient and the stage's loss falls.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn

ms.set_device("CPU")
ms.set_context(mode=ms.GRAPH_MODE)

import mindformers_2_0_0  # noqa: E402  (this folder: mindformers' own setup quirks)

import ms_grad_ops  # noqa: E402

ms_grad_ops.builtins.install()

VOCAB, SEQ_LEN, BATCH = 64, 32, 2
SIZES = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
             first_k_dense_replace=1, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=32,
             qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=4, num_experts_per_tok=2,
             n_shared_experts=1, n_group=1, topk_group=1, num_nextn_predict_layers=1, dsa_indexer_n_heads=4,
             dsa_indexer_head_dim=16, dsa_indexer_topk=8, seq_length=SEQ_LEN, max_position_embeddings=SEQ_LEN,
             batch_size=BATCH)


def build_model(mf: object, sparse: bool, compute_dtype: str, seed: int) -> nn.Cell:
    """``DeepseekV3ForCausalLM`` for one stage (``sparse``: the sparse stage's indexer loss)."""
    from mindformers.models.deepseek3.configuration_deepseek_v3 import DeepseekV3Config
    from mindformers.models.deepseek3.modeling_deepseek_v3 import DeepseekV3ForCausalLM

    ms.set_seed(seed)
    np.random.seed(seed)
    config = DeepseekV3Config(
        **SIZES, compute_dtype=compute_dtype, params_dtype="float32", layernorm_compute_dtype="float32",
        rotary_dtype="float32", softmax_compute_dtype="float32", initializer_range=0.05,
        dsa_indexer_loss_coeff=1.0, dsa_indexer_use_sparse_loss=sparse,
        moe_router_load_balancing_type="seq_aux_loss", moe_aux_loss_coeff=1e-4,  # the recipe's balance loss
        moe_grouped_gemm=True,  # mindformers' training graph builds no other MoE ("not supported now")
        mtp_loss_factor=0.3)  # required once num_nextn_predict_layers > 0
    mindformers_2_0_0.dsa_at_any_size(config)
    model = DeepseekV3ForCausalLM(config)
    model.set_train(True)
    return model


class TrainLoss(nn.Cell):
    """The sum mindformers' trainer minimises (``MFTrainOneStepCell``), plus its parts."""

    def __init__(self, model: nn.Cell) -> None:
        super().__init__()
        self.model = model

    def construct(self, input_ids: Tensor, labels: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        lm, mtp, aux, indexer = self.model(input_ids, labels=labels)
        return (lm + mtp + aux + indexer).sum(), lm.sum(), mtp.sum(), aux.sum(), indexer.sum()


class Stage:
    """A stage's loss, its gradient function (compiled on the first call) and AdamWeightDecay."""

    def __init__(self, name: str, model: nn.Cell, learning_rate: float) -> None:
        self.name = name
        self.model = model
        self.params = model.trainable_params()
        self.grad_fn = ms.value_and_grad(TrainLoss(model), None, self.params, has_aux=True)
        self.optimizer = nn.AdamWeightDecay(self.params, learning_rate=learning_rate, weight_decay=0.0)

    def step(self, input_ids: Tensor, labels: Tensor) -> tuple[dict[str, float], list[np.ndarray]]:
        (total, lm, mtp, aux, indexer), grads = self.grad_fn(input_ids, labels)
        self.optimizer(grads)
        losses = {"total": total, "lm": lm, "mtp": mtp, "aux": aux, "indexer": indexer}
        return {k: float(v.asnumpy()) for k, v in losses.items()}, [g.asnumpy() for g in grads]


def batches(seed: int, count: int) -> list[tuple[Tensor, Tensor]]:
    """``count`` fixed batches of a learnable task: the label of token t is ``(3 * t + 1) % VOCAB``."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        ids = rng.integers(0, VOCAB, (BATCH, SEQ_LEN))
        out.append((Tensor(ids.astype(np.int32)), Tensor(((3 * ids + 1) % VOCAB).astype(np.int32))))
    return out


def train(stage: Stage, data: list[tuple[Tensor, Tensor]], steps: int) -> dict:
    """``steps`` steps cycling over ``data``; the losses, the parameters whose first gradient was
    zero, and the times (the first step compiles)."""
    history, zero_grad, times = [], [], []
    for step in range(steps):
        start = time.time()
        losses, grads = stage.step(*data[step % len(data)])
        times.append(time.time() - start)
        if step == 0:
            zero_grad = [p.name for p, g in zip(stage.params, grads) if not np.any(g)]
        history.append(losses)
        print(f"[{stage.name}] step {step + 1:3d}  " + "  ".join(f"{k} {v:.4f}" for k, v in losses.items()), flush=True)
    return {"losses": history, "zero_grad": zero_grad, "n_params": len(stage.params), "first_step_s": times[0],
            "step_s": float(np.median(times[1:])) if steps > 1 else None}


def falling(history: list[dict], key: str) -> bool:
    """The stage's loss ``key`` ends below where it started (mean of the last two vs the first two)."""
    values = [h[key] for h in history]
    return len(values) >= 2 and float(np.mean(values[-2:])) < float(np.mean(values[:2]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="steps per stage")
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--compute-dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 unless both stages give every trainable parameter a non-zero gradient and "
                             "lower their loss")
    args = parser.parse_args()
    start = time.time()
    mf = mindformers_2_0_0.import_mindformers()
    mindformers_2_0_0.build_cpu_context()
    data = batches(args.seed, 2)

    warmup_model = build_model(mf, False, args.compute_dtype, args.seed)
    warmup = train(Stage("dense warm-up", warmup_model, args.learning_rate), data, args.steps)
    sparse_stage = Stage("sparse", build_model(mf, True, args.compute_dtype, args.seed), args.learning_rate)
    warm = warmup_model.parameters_dict()
    for name, param in sparse_stage.model.parameters_dict().items():
        param.set_data(warm[name].data.copy())  # the sparse stage starts where the warm-up ended
    sparse = train(sparse_stage, data, args.steps)

    result = {"dense_warmup": warmup, "sparse": sparse, "seconds": time.time() - start}
    # The warm-up trains only the indexers, so only the indexer loss can fall; the sparse stage
    # trains everything, on the total loss.
    result["ok"] = {"warmup_indexer_loss_falls": falling(warmup["losses"], "indexer"),
                    "sparse_total_loss_falls": falling(sparse["losses"], "total"),
                    "every_gradient_nonzero": not warmup["zero_grad"] and not sparse["zero_grad"],
                    "finite": bool(np.isfinite([v for s in (warmup, sparse) for h in s["losses"]
                                                for v in h.values()]).all())}
    print(f"trained both stages in {result['seconds']:.1f} s (first steps, compiling: "
          f"{warmup['first_step_s']:.1f} s and {sparse['first_step_s']:.1f} s); checks: {result['ok']}", flush=True)
    print("RESULT " + json.dumps(result), flush=True)
    if args.check and not all(result["ok"].values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
