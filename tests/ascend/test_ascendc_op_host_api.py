"""The stand-in of CANN's op_host API (tests/ascend/cann_stub) is no looser than the real one
(hicann/metadef, hicann/runtime, mirror-cann/asc-devkit; commits in docs/ascend_api.md): each `bad`
snippet is code the real headers reject, and it must not compile against the stand-in either; its
`good` form must compile, so a broken command line cannot make a test pass. Syntax only, one g++ per
snippet; CI needs no CANN source. Given the checkouts (CANN_METADEF, CANN_RUNTIME, ASC_DEVKIT,
LIBBOUNDSCHECK), the same snippets also run against the real headers: bad rejected, good accepted.

What a compiler cannot see is run instead (tests/ascend/test_ascendc_op_host.py, on both builds): the
getters that return nullptr (GetTilingData<T> on a small buffer, GetWorkspaceSizes, GetOutputShape),
the setters that fail, and the platform's values per SoC."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from _paths import ROOT, SCRIPTS

STUB = Path(__file__).resolve().parent / "cann_stub"
PRELUDE = '#include <cstdint>\n#include "register/op_def_registry.h"\n#include "tiling/platform/platform_ascendc.h"\n'
CANN_ENV = ("CANN_METADEF", "CANN_RUNTIME", "ASC_DEVKIT", "LIBBOUNDSCHECK")


@dataclass(frozen=True)
class Case:
    bad: str  # rejected by the real API
    good: str  # the form the real API accepts
    token: str  # in an error line g++ prints for `bad`: it failed for the intended reason


TILING = "gert::TilingContext* c"
CASES = {
    # What every op_host build against the real headers stopped at (issue 37): the real gert::Shape
    # has no unknown-rank query; CANN's ops test the one dim -2.
    "Shape_has_no_IsUnknownRank": Case(
        "bool F(const gert::Shape& s) { return s.IsUnknownRank(); }",
        "bool F(const gert::Shape& s) { return s.GetDimNum() == 1 && s.GetDim(0) == -2; }", "IsUnknownRank"),
    # The stand-in's own accessor is gone with it.
    "Shape_has_no_Dims": Case(
        "size_t F(const gert::Shape& s) { return s.Dims().size(); }",
        "size_t F(const gert::Shape& s) { return s.GetDimNum(); }", "Dims"),
    # PlatformAscendC() = delete: the platform comes from the tiling context.
    "PlatformAscendC_needs_the_platform_infos": Case(
        "void F() { platform_ascendc::PlatformAscendC p; (void)p; }",
        f"void F({TILING}) {{ platform_ascendc::PlatformAscendC p(c->GetPlatformInfo()); (void)p; }}",
        "PlatformAscendC"),
    "GetCoreMemSize_writes_a_uint64": Case(
        f"void F({TILING}) {{ uint32_t ub = 0;\n"
        "  platform_ascendc::PlatformAscendC(c->GetPlatformInfo()).GetCoreMemSize(platform_ascendc::CoreMemType::UB, "
        "ub); }",
        f"void F({TILING}) {{ uint64_t ub = 0;\n"
        "  platform_ascendc::PlatformAscendC(c->GetPlatformInfo()).GetCoreMemSize(platform_ascendc::CoreMemType::UB, "
        "ub); }", "uint"),
    "GetCoreMemSize_returns_nothing": Case(
        f"uint64_t F({TILING}) {{ uint64_t ub = 0;\n"
        "  return platform_ascendc::PlatformAscendC(c->GetPlatformInfo()).GetCoreMemSize("
        "platform_ascendc::CoreMemType::UB, ub); }",
        f"uint64_t F({TILING}) {{ uint64_t ub = 0;\n"
        "  platform_ascendc::PlatformAscendC(c->GetPlatformInfo()).GetCoreMemSize(platform_ascendc::CoreMemType::UB, "
        "ub); return ub; }", "void"),
    # InferShape sees shapes, the tiling storage shapes (origin + storage).
    "InferShape_input_is_a_Shape": Case(
        "void F(gert::InferShapeContext* c) { const gert::StorageShape* s = c->GetRequiredInputShape(0); (void)s; }",
        "void F(gert::InferShapeContext* c) { const gert::Shape* s = c->GetRequiredInputShape(0); (void)s; }",
        "StorageShape"),
    "Tiling_input_is_a_StorageShape": Case(
        f"void F({TILING}) {{ const gert::Shape* s = c->GetRequiredInputShape(0); (void)s; }}",
        f"void F({TILING}) {{ const gert::StorageShape* s = c->GetRequiredInputShape(0); (void)s; }}",
        "Shape"),
    "InferShape_output_shape_is_mutable_Shape": Case(
        "void F(gert::InferShapeContext* c) { gert::StorageShape* s = c->GetOutputShape(0); (void)s; }",
        "void F(gert::InferShapeContext* c) { gert::Shape* s = c->GetOutputShape(0); (void)s; }", "StorageShape"),
    # InferDataType gets dtypes only.
    "InferDataType_has_no_shapes": Case(
        "void F(gert::InferDataTypeContext* c) { (void)c->GetRequiredInputShape(0); }",
        "void F(gert::InferDataTypeContext* c) { (void)c->GetRequiredInputDataType(0); }", "GetRequiredInputShape"),
    "InferDataType_has_no_output_shape": Case(
        "void F(gert::InferDataTypeContext* c) { (void)c->GetOutputShape(0); }",
        "void F(gert::InferDataTypeContext* c) { (void)c->SetOutputDataType(0, ge::DT_FLOAT); }", "GetOutputShape"),
    # RuntimeAttrs: a float attribute is a float, not a double.
    "Float_attribute_is_a_float": Case(
        "void F(const gert::RuntimeAttrs* a) { const double* v = a->GetFloat(0); (void)v; }",
        "void F(const gert::RuntimeAttrs* a) { const float* v = a->GetFloat(0); (void)v; }", "float"),
    # The tiling data is typed by the caller: no untyped overload.
    "GetTilingData_needs_its_type": Case(
        f"void F({TILING}) {{ (void)c->GetTilingData(); }}",
        f"void F({TILING}) {{ (void)c->GetTilingData<uint64_t>(); }}", "GetTilingData"),
}


def host_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_ascend_host", SCRIPTS / "check_ascend_host.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def flags(api: str) -> list[str]:
    """The include flags and defines of the stand-in or of the real headers (skipped without them)."""
    if api == "stand-in":
        return [f"-I{STUB}"]
    if not all(os.environ.get(v) for v in CANN_ENV):
        pytest.skip(f"{', '.join(CANN_ENV)} not set: the real headers are compared only then; CI has none")
    hc = host_check()
    sources = hc.Sources(*(Path(os.environ[v]).resolve() for v in CANN_ENV))
    return [*hc.DEFINES, *sources.includes()]


def compile_snippet(body: str, api: str) -> subprocess.CompletedProcess[str]:
    cxx = shutil.which("g++")
    assert cxx, "g++ is required"
    return subprocess.run([cxx, "-std=c++17", "-fsyntax-only", *flags(api), "-x", "c++", "-"],
                          input=PRELUDE + body + "\n", capture_output=True, text=True, check=False, cwd=ROOT)


@pytest.mark.parametrize("api", ["stand-in", "CANN"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_rejects_what_the_real_api_rejects(name: str, api: str) -> None:
    proc = compile_snippet(CASES[name].bad, api)
    assert proc.returncode != 0, f"{name}: the {api} accepts code the real API rejects"
    errors = [ln for ln in proc.stderr.splitlines() if ": error:" in ln]
    assert any(CASES[name].token in ln for ln in errors), proc.stderr


@pytest.mark.parametrize("api", ["stand-in", "CANN"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_accepts_the_correct_form(name: str, api: str) -> None:
    proc = compile_snippet(CASES[name].good, api)
    assert proc.returncode == 0, proc.stderr
