"""MindSpore's training idioms on DSAttention and on every public Cell, each step checked against the
float64 reference with the training matrix's cases (``_cell_matrix``): ``nn.WithLossCell`` +
``nn.TrainOneStepCell``; ``TrainOneStepCell`` under ``set_inputs`` with dynamic token counts (one
GRAPH compile, two batches); ``ms.amp.auto_mixed_precision`` O0-O3 and ``ms.amp.build_train_network``;
``Cell.recompute()``; ``ms.save_checkpoint`` / ``ms.load_checkpoint``.

Under amp the Dense layers in front compute in float16, so the Cells' inputs differ from the
reference's by float16 rounding: those cases run in bfloat16, whose tolerance (1e-2) holds them
(measured on a Zen4 EPYC: worst 5.0e-3 over every Cell and level), and skip the one check that
needs the inputs to the bit (the indexer's selection against the float64 scores).
"""
from __future__ import annotations

from collections.abc import Iterator

import mindspore as ms
import numpy as np
import pytest
from _cell_matrix import BUILDERS, KL_WEIGHT, LR, Case, applied_gradients, dynamic, train_step
from mindspore import Tensor, nn

import ms_grad_ops as mgo

CELLS = sorted(BUILDERS)
LAYERS = ("ContextParallelDSAttention", "DSAttention")   # Cells with parameters of their own
LEVELS = ("O0", "O1", "O2", "O3")


def _layout(cell: str) -> str | None:
    """TND where the Cell has layouts (token counts vary in TND), else none."""
    return "TND" if "TND" in BUILDERS[cell].layouts else None


@pytest.fixture
def graph() -> Iterator[None]:
    ms.set_context(mode=ms.GRAPH_MODE)
    yield
    ms.set_context(mode=ms.PYNATIVE_MODE)


class _LossOnly(nn.Cell):
    """The case network's loss alone (what ``TrainOneStepCell`` differentiates); parameter names kept."""

    def __init__(self, net: nn.Cell) -> None:
        super().__init__(auto_prefix=False)
        self.net = net

    def construct(self, *inputs: Tensor) -> Tensor:
        return self.net(*inputs)[0]


def _forward(net: nn.Cell, inputs: tuple) -> list[np.ndarray]:
    """``aux`` of a PyNative forward (the Cell's outputs, the selected keys) before the step."""
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        return [a.asnumpy() for a in net(*inputs)[1]]
    finally:
        ms.set_context(mode=mode)


def _params(case: Case) -> list[np.ndarray]:
    return [p.asnumpy().astype(np.float64) for p in case.net.trainable_params()]


def _step_and_check(case: Case, train: nn.Cell, inputs: tuple, aux_net: nn.Cell | None = None) -> None:
    """One step of ``train`` on ``inputs``; the gradients it applied against ``case``'s reference."""
    before = _params(case)
    aux = _forward(aux_net or case.net, inputs)
    train(*inputs)
    case.check(aux, applied_gradients(case, before), before)


# -- nn.WithLossCell + nn.TrainOneStepCell ------------------------------------------------------

class _Backbone(nn.Cell):
    """Dense -> DSAttention: ``(out, indexer_loss)``, the model ``nn.WithLossCell`` wraps."""

    def __init__(self, net: nn.Cell) -> None:
        super().__init__(auto_prefix=False)
        self.dense, self.layer = net.dense, net.layer

    def construct(self, h: Tensor) -> tuple[Tensor, Tensor]:
        return self.layer(self.dense(h))


class _Objective(nn.Cell):
    """The loss function ``nn.WithLossCell`` applies: ``sum(out * label) + KL_WEIGHT * indexer_loss``."""

    def construct(self, outputs: tuple, label: Tensor) -> Tensor:
        out, loss = outputs
        return (out * label).sum() + KL_WEIGHT * loss.sum()


def test_with_loss_cell_and_train_one_step_cell(graph: None) -> None:
    """DSAttention, BSND, bfloat16: the model, a loss function, ``WithLossCell``, ``TrainOneStepCell``."""
    case = BUILDERS["DSAttention"].build("BSND", "bfloat16")
    h, d_out = case.inputs
    loss_net = nn.WithLossCell(_Backbone(case.net), _Objective())
    train = nn.TrainOneStepCell(loss_net, nn.SGD(case.net.trainable_params(), learning_rate=LR))
    assert [p.name for p in loss_net.trainable_params()] == [p.name for p in case.net.trainable_params()]
    _step_and_check(case, train, (h, d_out), None)


@pytest.mark.parametrize("cell", CELLS)
def test_train_one_step_cell_with_dynamic_token_counts(graph: None, cell: str) -> None:
    """``TrainOneStepCell.set_inputs`` with every dim unknown: one compiled graph trains two batches
    of other token counts (and sequence counts), each step against its reference."""
    layout = _layout(cell)
    first, second = (BUILDERS[cell].build(layout, "bfloat16", variant) for variant in (0, 1))
    assert first.inputs[0].shape != second.inputs[0].shape
    train = nn.TrainOneStepCell(_LossOnly(first.net), nn.SGD(first.net.trainable_params(), learning_rate=LR))
    train.set_inputs(*dynamic(first.inputs, second.inputs))
    _step_and_check(first, train, first.inputs)
    # the second batch's own initial parameters (same names and shapes, other values)
    for p, q in zip(first.net.trainable_params(), second.net.trainable_params()):
        p.set_data(q.data.copy())
    second.net = first.net
    _step_and_check(second, train, second.inputs)
    assert len(train.compile_cache) == 1, f"{cell}: compiled {len(train.compile_cache)} times"


# -- automatic mixed precision --------------------------------------------------------------------

@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("cell", CELLS)
def test_auto_mixed_precision_levels(cell: str, level: str) -> None:
    """PyNative, every level: the network ``auto_mixed_precision`` returns trains (amp's float16 in
    the Dense layers; the Cells' kernels keep their dtypes, docs/dsattention.md "Mixed precision")."""
    case = BUILDERS[cell].build(_layout(cell), "bfloat16", exact_inputs=False)
    net = ms.amp.auto_mixed_precision(case.net, level)
    train = nn.TrainOneStepCell(_LossOnly(net), nn.SGD(case.net.trainable_params(), learning_rate=LR))
    _step_and_check(case, train, case.inputs, net)


# IndexerKLLoss and DenseIndexerKLLoss take their softmax statistics as network inputs here, and in GRAPH mode amp O2/O3
# casts a network's float inputs: the Cell refuses float16 statistics (they must be float32, as
# SparseFlashAttention returns them; fed from inside the network they are, see test_dsa_chain_amp).
@pytest.mark.parametrize(("cell", "level"), [(c, "O2") for c in CELLS] + [(c, "O3") for c in LAYERS])
def test_build_train_network(graph: None, cell: str, level: str) -> None:
    """GRAPH mode, ``build_train_network`` (``loss_scale_manager=None``: MindSpore's CPU backend has
    no dynamic loss scaling, O2's default). O3 differs from O2 inside the layers only (LayerNorm)."""
    case = BUILDERS[cell].build(_layout(cell), "bfloat16", exact_inputs=False)
    optimizer = nn.SGD(case.net.trainable_params(), learning_rate=LR)
    train = ms.amp.build_train_network(_LossOnly(case.net), optimizer, level=level, loss_scale_manager=None)
    if cell in ("IndexerKLLoss", "DenseIndexerKLLoss"):
        with pytest.raises(TypeError, match="argument 'softmax_max' must be float32, got float16"):
            train(*case.inputs)
        return
    _step_and_check(case, train, case.inputs)


class _Chain(nn.Cell):
    """Indexer -> sparse attention -> indexer KL loss, their statistics passed inside the network."""

    def __init__(self) -> None:
        super().__init__()
        self.dense = nn.Dense(8, 4 * 16 + 16 + 2 * 8 + 8 + 2)
        self.indexer = mgo.nn.LightningIndexer(4, layout="TND")
        self.attention = mgo.nn.SparseFlashAttention(0.25, layout="TND", return_softmax_lse=True)
        self.kl = mgo.nn.IndexerKLLoss(0.25, layout="TND")

    def construct(self, h: Tensor, lengths: Tensor) -> Tensor:
        t = h.shape[0]
        y = self.dense(h).astype(ms.float32)
        q, kv = y[:, :64].reshape(t, 4, 16), y[:, 64:80].reshape(t, 1, 16)
        qi, ki, w = y[:, 80:96].reshape(t, 2, 8), y[:, 96:104].reshape(t, 1, 8), y[:, 104:]
        q, kv, qi, ki = (a.astype(ms.bfloat16) for a in (q, kv, qi, ki))
        idx, _ = self.indexer(qi, ki, w, lengths, lengths)
        out, smax, ssum = self.attention(q, kv, None, idx, None, None, lengths, lengths)
        kl = self.kl(q, kv, qi, ki, w, idx, smax, ssum, None, None, lengths, lengths)
        return (out.astype(ms.float32) ** 2).sum() + kl.sum()


@pytest.mark.parametrize("level", ["O2", "O3"])
def test_dsa_chain_amp(graph: None, level: str) -> None:
    """The kernel Cells chained as a layer uses them, GRAPH O2/O3: the statistics go from
    SparseFlashAttention to IndexerKLLoss in float32; a step runs and moves the parameters."""
    net = _Chain()
    train = ms.amp.build_train_network(net, nn.SGD(net.trainable_params(), learning_rate=0.1), level=level,
                                       loss_scale_manager=None)
    before = net.dense.weight.asnumpy().copy()
    loss = train(Tensor(np.random.default_rng(0).standard_normal((11, 8)), ms.float32),
                 Tensor(np.array([5, 11], np.int32)))
    assert np.isfinite(loss.asnumpy()).all()
    assert np.isfinite(net.dense.weight.asnumpy()).all() and (net.dense.weight.asnumpy() != before).any()


# -- recompute ------------------------------------------------------------------------------------

@pytest.mark.parametrize("cell", CELLS)
def test_recompute(cell: str) -> None:
    """``Cell.recompute()`` on the Cell: the same gradients (GRAPH for the layers, PyNative for the
    kernel Cells, whose recompute re-runs one kernel)."""
    case = BUILDERS[cell].build(_layout(cell), "float16")
    target = case.net.layer if cell in LAYERS else case.net.body.cell
    target.recompute()
    train_step(case, "graph" if cell in LAYERS else "pynative")


# -- checkpoints ----------------------------------------------------------------------------------

@pytest.mark.parametrize("cell", CELLS)
def test_checkpoint_round_trip(cell: str, tmp_path: object) -> None:
    """A trained network saved and loaded into a fresh one: every parameter by name, the same
    forward bits (the kernel Cells hold no parameters: their networks' Dense layers round-trip)."""
    layout = _layout(cell)
    case = BUILDERS[cell].build(layout, "float32")
    train = nn.TrainOneStepCell(_LossOnly(case.net), nn.SGD(case.net.trainable_params(), learning_rate=LR))
    train(*case.inputs)
    path = str(tmp_path / "net.ckpt")
    ms.save_checkpoint(case.net, path)
    fresh = BUILDERS[cell].build(layout, "float32", 1).net     # other initial values
    not_loaded, unused = ms.load_param_into_net(fresh, ms.load_checkpoint(path))
    assert not not_loaded and not unused, (not_loaded, unused)
    for p, q in zip(case.net.trainable_params(), fresh.trainable_params()):
        assert p.name == q.name and np.array_equal(p.asnumpy(), q.asnumpy()), p.name
    for a, b in zip(case.net(*case.inputs)[1], fresh(*case.inputs)[1]):
        assert np.array_equal(a.asnumpy(), b.asnumpy())
