"""``DSAttention.from_pretrained`` on synthetic DeepSeek-V3.2 Hugging Face releases (written by
``examples/hf_release_layer.py``: config.json, index, four shards, FP8 + block factors, bfloat16,
float16 and float32 tensors, other layers' and MLP/embedding/head tensors, the large ones holes in the
files): the layer equals the one built from DeepSeek's ``ModelArgs`` names with the same weights
(``from_deepseek`` + ``load_deepseek_state_dict`` of float32 tensors under their inference names),
bitwise, and so does its output; ``load_deepseek_state_dict`` on the folder and on Hugging Face names;
only the shards holding the layer are opened and only its tensors read (peak memory); every error
names what and where; the config mapping at DeepSeek-V3.2's own sizes."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from _hf_example import example
from mindspore import Tensor

import ms_grad_ops as mgo
from ms_grad_ops.nn import deepseek_io

PREFIX = "model.layers.1.self_attn."
SHARDS = [f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)]


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, np.ndarray]]]:
    """An FP8 release (as DeepSeek's) and a bfloat16 one; each: folder, layer 1's float32 weights."""
    out = {}
    for kind in ("fp8", "bf16"):
        folder = tmp_path_factory.mktemp(kind)
        out[kind] = (folder, example.synthetic_release(folder, fp8=kind == "fp8", seed=3 + len(out)))
    return out


def _copy(release: Path, tmp_path: Path) -> Path:
    """A copy of ``release`` to break (holes stay holes: shards written anew would not be sparse, so
    only the small files are copied and the shards linked)."""
    dst = tmp_path / "release"
    dst.mkdir()
    for p in release.iterdir():
        (shutil.copy if p.suffix == ".json" else lambda a, b: Path(b).symlink_to(a))(p, dst / p.name)
    return dst


def _bits(layer: mgo.nn.DSAttention) -> dict[str, np.ndarray]:
    return {p.name: p.asnumpy().view(np.uint32) for p in layer.trainable_params()}


def _assert_same(got: mgo.nn.DSAttention, want: mgo.nn.DSAttention) -> None:
    a, b = _bits(got), _bits(want)
    assert sorted(a) == sorted(b)
    for name in a:
        assert np.array_equal(a[name], b[name]), name


@pytest.mark.parametrize("kind", ["fp8", "bf16"])
def test_from_pretrained_equals_the_model_args_layer(kind: str, releases: dict, tmp_path: Path) -> None:
    """Layer 1 of the release against ``from_deepseek(ModelArgs)`` + its float32 weights under DeepSeek's
    names: parameters, rope tables and softmax scale bitwise, output and selection equal. Shards 1 and 4
    (no tensor of layer 1) are deleted first: the loader must not open them."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    release, weights = releases[kind]
    folder = _copy(release, tmp_path)
    for shard in (SHARDS[0], SHARDS[3]):
        (folder / shard).unlink()
    got = mgo.nn.DSAttention.from_pretrained(folder, layer=1)
    want = mgo.nn.DSAttention.from_deepseek(example.MODEL_ARGS)
    want.load_deepseek_state_dict({"layers.1.attn." + k: v for k, v in weights.items()}, prefix="layers.1.attn.")
    _assert_same(got, want)
    for table in ("cos", "sin"):
        assert np.array_equal(getattr(got, table).asnumpy(), getattr(want, table).asnumpy()), table
    assert got.cos.shape[0] == 16384 and got.softmax_scale == want.softmax_scale
    assert got.softmax_scale != 16 ** -0.5, "YaRN's softmax factor is missing"
    x = Tensor(np.random.default_rng(5).standard_normal((2, 16, 160)).astype(np.float32))
    (out, loss), (ref, ref_loss) = got(x), want(x)
    assert np.isfinite(out.asnumpy()).all() and np.abs(out.asnumpy()).max() > 0
    assert np.array_equal(out.asnumpy(), ref.asnumpy()) and np.array_equal(loss.asnumpy(), ref_loss.asnumpy())
    assert np.array_equal(got.select(x).asnumpy(), want.select(x).asnumpy())

    # load_deepseek_state_dict: the folder with a Hugging Face prefix, and Hugging Face names in a mapping.
    hf_names = {v: k for k, v in example.HF_TO_DEEPSEEK.items()}
    for state in (folder, {PREFIX + hf_names[k]: v for k, v in weights.items()}):
        again = mgo.nn.DSAttention.from_deepseek(example.MODEL_ARGS)
        again.load_deepseek_state_dict(state, prefix=PREFIX)
        _assert_same(again, want)


def test_single_file_release(releases: dict, tmp_path: Path) -> None:
    """A release of one ``model.safetensors`` and no index loads the same layer."""
    def merge(shards: dict) -> None:
        merged = {k: v for tensors in shards.values() for k, v in tensors.items()}
        shards.clear()
        shards["model.safetensors"] = merged

    folder = tmp_path / "single"
    weights = example.synthetic_release(folder, seed=3, edit=merge)
    (folder / "model.safetensors.index.json").unlink()
    assert all(np.array_equal(weights[k], v) for k, v in releases["fp8"][1].items())
    got = mgo.nn.DSAttention.from_pretrained(folder, layer=1)
    want = mgo.nn.DSAttention.from_pretrained(releases["fp8"][0], layer=1)
    _assert_same(got, want)


def _bytes_read() -> int:
    """Bytes this process has read through read() so far (Linux' /proc/self/io rchar)."""
    return int(next(line.split()[1] for line in Path("/proc/self/io").read_text().splitlines()
                    if line.startswith("rchar:")))


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux' /proc/self/io and clear_refs")
def test_load_reads_one_layer_only(releases: dict) -> None:
    """The fp8 release lists over a GiB, half of it in the two shards holding layer 1 (its 256 experts;
    the MLP, embedding and head weights are holes). Loading layer 1 reads the index, two shard headers
    and the layer's tensors: well under a MiB (every byte read() returns counts, holes included), and
    its peak resident memory grows by far less than the shards."""
    release, _ = releases["fp8"]
    listed = json.loads((release / "model.safetensors.index.json").read_text())["metadata"]["total_size"]
    opened = sum((release / s).stat().st_size for s in SHARDS[1:3])
    assert listed > 1 << 30 and opened > 400 << 20
    mgo.nn.DSAttention.from_pretrained(release, layer=1)               # warm-up: first-call allocations
    before = _bytes_read()
    attn, grown = example._peak_growth(lambda: mgo.nn.DSAttention.from_pretrained(release, layer=1))
    read = _bytes_read() - before
    params = sum(p.size for p in attn.trainable_params()) * 4
    print(f"release {listed} bytes listed, {opened} in the shards opened; layer {params} bytes float32; "
          f"from_pretrained read {read} bytes, peak resident +{grown} bytes")
    assert read < 1 << 20 and grown < 32 << 20


def _shard_of(folder: Path, name: str) -> Path:
    """The file the release's index puts ``name`` in."""
    return folder / json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"][name]


def _holding(shards: dict, name: str) -> dict:
    """The tensors of the shard that holds ``name`` (in a release's table before it is written)."""
    return next(t for t in shards.values() if name in t)


def _error(folder: Path, layer: int = 1, **kwargs: object) -> str:
    with pytest.raises(ValueError) as info:
        mgo.nn.DSAttention.from_pretrained(folder, layer=layer, **kwargs)
    return str(info.value)


def test_missing_layer_names_the_layer(releases: dict) -> None:
    msg = _error(releases["fp8"][0], layer=7)
    assert "DSAttention.from_pretrained: layer 7 is not in the release" in msg, msg
    assert "'model.layers.7.self_attn.'" in msg and "its layers: 0-2" in msg, msg
    with pytest.raises(ValueError, match="layer 7 is not in the release"):
        mgo.nn.DSAttention.from_deepseek(example.MODEL_ARGS).load_deepseek_state_dict(
            releases["fp8"][0], prefix="model.layers.7.self_attn.")
    with pytest.raises(ValueError, match="layer must be an int >= 0, got -1"):
        mgo.nn.DSAttention.from_pretrained(releases["fp8"][0], layer=-1)


O_PROJ, NORM = PREFIX + "o_proj.weight", PREFIX + "kv_a_layernorm.weight"
KV_SCALE, Q_SCALE = PREFIX + "kv_b_proj.weight_scale_inv", PREFIX + "q_a_proj.weight_scale_inv"


def _break(shards: dict) -> None:
    """o_proj transposed, a tensor DeepSeek-V3.2 does not have, a missing norm, a wrong block grid."""
    held = _holding(shards, O_PROJ)
    held[O_PROJ] = (held[O_PROJ][0], np.ascontiguousarray(held[O_PROJ][1].T))
    held[PREFIX + "q_proj.weight"] = ("BF16", np.zeros((4, 4), np.uint16))
    del _holding(shards, NORM)[NORM]
    _holding(shards, KV_SCALE)[KV_SCALE] = ("F32", np.ones((2, 2), np.float32))


def test_tensor_errors_name_tensor_file_and_shapes(tmp_path: Path) -> None:
    folder = tmp_path / "broken"
    example.synthetic_release(folder, edit=_break)
    msg = _error(folder)
    at = {name: f"{name} in {_shard_of(folder, name)}" for name in (O_PROJ, PREFIX + "q_proj.weight", KV_SCALE)}
    for part in (f"missing tensors ['{NORM}']", f"unexpected tensors ['{at[PREFIX + 'q_proj.weight']}']",
                 f"{at[O_PROJ]} (expected [160, 48], got [48, 160])",
                 f"{at[KV_SCALE]}, has shape [2, 2], expected [1, 1] for a 80 x 16 FP8 weight"):
        assert part in msg, msg

    index = folder / "model.safetensors.index.json"
    table = json.loads(index.read_text())
    table["weight_map"][O_PROJ] = "model-00009-of-00009.safetensors"
    index.write_text(json.dumps(table))
    msg = _error(folder)
    assert f"puts {O_PROJ} in model-00009-of-00009.safetensors, which {folder} does not have" in msg, msg


def test_fp8_weight_without_its_factors(tmp_path: Path) -> None:
    folder = tmp_path / "no_scale"
    example.synthetic_release(folder, edit=lambda shards: _holding(shards, Q_SCALE).pop(Q_SCALE))
    q_a = PREFIX + "q_a_proj.weight"
    msg = _error(folder)
    assert f"{q_a} in {_shard_of(folder, q_a)} is float8_e4m3fn but has no {Q_SCALE}" in msg, msg


def _config(folder: Path, **changes: object) -> None:
    path = folder / "config.json"
    config = {**json.loads(path.read_text()), **changes}
    path.write_text(json.dumps({k: v for k, v in config.items() if v is not None}))


@pytest.mark.parametrize("changes, expected", [
    ({"model_type": "deepseek_v3"}, "config.json has model_type 'deepseek_v3', expected 'deepseek_v32'"),
    ({"q_lora_rank": None, "index_topk": None}, "config.json lacks ['q_lora_rank', 'index_topk']"),
    ({"rope_scaling": {"type": "linear", "factor": 2}}, "rope_scaling type 'linear'"),
    ({"rope_scaling": {**example.CONFIG["rope_scaling"], "mscale": 1.0}}, "mscale 1.0 != mscale_all_dim 0.707"),
    ({"rope_scaling": {"type": "yarn", "factor": 40}}, "(yarn) lacks ['original_max_position_embeddings']"),
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [64, 64]}}, "weight_block_size [64, 64]"),
    ({"attention_bias": True}, "attention_bias true"),
    ({"indexer_rope_interleave": True}, "indexer_rope_interleave True"),
])
def test_config_errors(releases: dict, tmp_path: Path, changes: dict, expected: str) -> None:
    folder = _copy(releases["fp8"][0], tmp_path)
    _config(folder, **changes)
    msg = _error(folder)
    assert msg.startswith(f"DSAttention.from_pretrained: {folder / 'config.json'}") and expected in msg, msg


def test_max_seq_len_and_yarn(releases: dict, tmp_path: Path) -> None:
    """max_seq_len: DeepSeek's ModelArgs default 16384 (max_position_embeddings is not read); an override
    that would turn YaRN off is an error; without rope_scaling YaRN stays off at any max_seq_len."""
    folder = _copy(releases["fp8"][0], tmp_path)
    kwargs = deepseek_io.pretrained_kwargs(folder, {})
    assert kwargs["max_seq_len"] == 16384
    # transformers 5 writes the same as rope_parameters (rope_type, rope_theta inside).
    yarn = {k: v for k, v in example.CONFIG["rope_scaling"].items() if k != "type"}
    _config(folder, rope_scaling=None, rope_theta=None,
            rope_parameters={"rope_type": "yarn", "rope_theta": 50000, **yarn})
    assert deepseek_io.pretrained_kwargs(folder, {}) == kwargs
    assert "max_seq_len 64 <= original_seq_len 64 turns YaRN off" in _error(folder, max_seq_len=64)
    _config(folder, rope_parameters=None, max_position_embeddings=128)
    kwargs = deepseek_io.pretrained_kwargs(folder, {"max_seq_len": 256})
    assert kwargs["max_seq_len"] == kwargs["original_seq_len"] == 256
    assert mgo.nn.DSAttention.from_pretrained(folder, 1, max_seq_len=256).softmax_scale == 16 ** -0.5


def test_config_mapping_at_deepseek_sizes(tmp_path: Path) -> None:
    """DeepSeek-V3.2's release config (its Hugging Face keys and values) gives the arguments their
    inference code runs it with: ``config_671B_v3.2.json`` (ModelArgs names) + ModelArgs' defaults."""
    theirs = {"vocab_size": 129280, "dim": 7168, "inter_dim": 18432, "moe_inter_dim": 2048, "n_layers": 61,
              "n_dense_layers": 3, "n_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1,
              "n_activated_experts": 8, "n_expert_groups": 8, "n_limited_groups": 4, "route_scale": 2.5,
              "score_func": "sigmoid", "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
              "qk_rope_head_dim": 64, "v_head_dim": 128, "dtype": "fp8", "scale_fmt": "ue8m0",
              "index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048}
    (tmp_path / "config.json").write_text(json.dumps(example.DEEPSEEK_V32))
    got = deepseek_io.pretrained_kwargs(tmp_path, {"layout": "TND"})
    assert got == {**deepseek_io.layer_kwargs(theirs), "eps": 1e-6, "layout": "TND"}
    assert got["max_seq_len"] == 16384 and got["original_seq_len"] == 4096 and got["rope_factor"] == 40


def test_example_runs(capsys: pytest.CaptureFixture) -> None:
    """examples/hf_release_layer.py: writes its synthetic release, loads layer 1, checks it, exits 0."""
    assert example.main([]) == 0
    assert "parameters bitwise equal, output equal" in capsys.readouterr().out


def test_loaded_layer_trains_in_graph_mode(releases: dict) -> None:
    """The loaded parameters (set from the arrays read, without a copy) train as any: one GRAPH-mode
    TrainOneStepCell step through a Dense in front of the layer changes both, finitely."""
    from mindspore import nn

    attn = mgo.nn.DSAttention.from_pretrained(releases["bf16"][0], layer=1)

    class Net(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.front, self.attn = nn.Dense(160, 160), attn

        def construct(self, x: Tensor) -> Tensor:
            out, loss = self.attn(self.front(x))
            return (out * out).mean() + loss.sum()

    net = Net()
    before = {p.name: p.asnumpy().copy() for p in net.trainable_params()}
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        step = nn.TrainOneStepCell(net, nn.SGD(net.trainable_params(), learning_rate=0.1))
        loss = step(Tensor(np.random.default_rng(6).standard_normal((1, 16, 160)).astype(np.float32)))
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert np.isfinite(loss.asnumpy()).all()
    after = {p.name: p.asnumpy() for p in net.trainable_params()}
    for name in ("front.weight", "attn.wo.weight", "attn.w_uk", "attn.wq_a.weight"):
        assert np.isfinite(after[name]).all() and not np.array_equal(after[name], before[name]), name
