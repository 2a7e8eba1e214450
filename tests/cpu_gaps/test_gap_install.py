"""ms_grad_ops.cpu_gaps.install()/uninstall(): every supplied MindSpore object is rebound wherever it
is bound (its home, MindSpore's public namespaces, user modules imported before, under any name),
only on CPU, restored by uninstall(); builtins.install() includes it; the stand-ins accept the
calls that configure a Primitive."""
from __future__ import annotations

import importlib
import sys
import types

import mindspore as ms
import pytest
from mindspore import mint, ops
from mindspore.ops import auto_generate
from mindspore.ops import operations as P

from ms_grad_ops import builtins, cpu_gaps

# Public names users reach the supplied objects by (beyond their home modules).
PUBLIC = [(auto_generate, "RmsNorm"), (P, "RmsNorm"), (auto_generate, "TopkExt"), (auto_generate, "SliceExt"),
          (P, "BatchMatMul"), (ops, "BatchMatMul"), (auto_generate, "GroupedMatmul"), (auto_generate, "SortExt"),
          (auto_generate, "CumsumExt"), (auto_generate, "IndexSelect"), (auto_generate, "Outer"), (ops, "MoveTo"),
          (ops, "AlltoAll"), (ops, "AlltoAllV"), (ops, "rms_norm"), (ops, "swiglu"), (ops, "moe_token_permute"),
          (ops, "moe_token_unpermute"), (ops, "move_to"), (mint, "topk"), (mint, "sort"), (mint, "cumsum"),
          (mint, "index_select"), (mint, "outer"), (mint.nn.functional, "embedding"), (mint, "arange"),
          (mint, "full"), (mint, "ones_like"), (mint, "zeros_like"), (mint, "stack"), (mint, "roll"), (ops, "roll"),
          (mint, "split")]


def _home(module_name: str, name: str) -> object:
    return getattr(importlib.import_module(module_name), name)


def test_install_rebinds_everywhere_and_uninstall_restores() -> None:
    cpu_gaps.uninstall()  # the folder's fixture installed them
    originals = {key: _home(*key) for key in cpu_gaps.SUPPLIED}
    public = [getattr(m, n) for m, n in PUBLIC]
    user = types.ModuleType("user_module_imported_before_install")
    user.Norm = P.RmsNorm  # `from mindspore.ops.operations import RmsNorm as Norm`
    user.topk = mint.topk
    sys.modules[user.__name__] = user
    try:
        assert not cpu_gaps.installed()
        assert cpu_gaps.install() and cpu_gaps.install()  # idempotent
        assert cpu_gaps.installed()
        for key, ours in cpu_gaps.SUPPLIED.items():
            assert _home(*key) is ours, key
        for (module, name), original in zip(PUBLIC, public):
            assert getattr(module, name) is not original, f"{module.__name__}.{name}"
            assert getattr(module, name) in cpu_gaps.SUPPLIED.values(), f"{module.__name__}.{name}"
        assert user.Norm is cpu_gaps.norm.RmsNorm and user.topk is cpu_gaps.sorting.topk_ext
        cpu_gaps.uninstall()
        cpu_gaps.uninstall()
        assert not cpu_gaps.installed()
        for key, original in originals.items():
            assert _home(*key) is original, f"{key} not restored"
        assert [getattr(m, n) for m, n in PUBLIC] == public
        assert user.Norm is originals[("mindspore.ops.auto_generate.gen_ops_prim", "RmsNorm")]
    finally:
        cpu_gaps.install()
        del sys.modules[user.__name__]


def test_other_device_targets_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu_gaps.uninstall()
    public = [getattr(m, n) for m, n in PUBLIC]
    real = ms.get_context

    def ascend(key: str) -> object:
        return "Ascend" if key == "device_target" else real(key)

    monkeypatch.setattr(ms, "get_context", ascend)
    assert cpu_gaps.install() is False
    assert not cpu_gaps.installed()
    assert [getattr(m, n) for m, n in PUBLIC] == public
    monkeypatch.undo()
    assert cpu_gaps.install()


def test_builtins_install_includes_cpu_gaps() -> None:
    cpu_gaps.uninstall()
    try:
        assert builtins.install()
        assert cpu_gaps.installed() and P.RmsNorm is cpu_gaps.norm.RmsNorm
        builtins.uninstall()
        assert not cpu_gaps.installed()
    finally:
        builtins.uninstall()
        cpu_gaps.install()


def test_stand_ins_accept_primitive_configuration() -> None:
    """mindformers shards, recomputes and tags its primitives; on CPU none of it changes the math."""
    for make in (lambda: P.RmsNorm(1e-6), lambda: auto_generate.TopkExt(), lambda: P.BatchMatMul(True, False),
                 lambda: auto_generate.Swiglu(), lambda: ops.MoveTo()):
        prim = make()
        assert prim.shard(((1, 1), (1,))).recompute(False).add_prim_attr("recompute", False) is prim
        assert prim.set_device("CPU") is prim
    bmm = P.BatchMatMul(True, False)
    assert (bmm.transpose_a, bmm.transpose_b) == (True, False)
