"""The CPU twin of the Ascend C API (ascendc/twin) is no looser than the real API (asc-devkit, read
at commit 82b89a15): each `bad` snippet below is code the real headers reject, and it must not
compile against the twin either; its `good` twin, the correct form, must compile, so a broken
command line or include path cannot make a test pass. Syntax only, one g++ per snippet, with the
harness build's flags; no asc-devkit needed. The declarations compared, real against twin, are
tabled in docs/ascend.md.

MGO_TWIN_INCLUDE=<dir> compiles the snippets against another copy of the twin (how the `bad`
snippets were shown to compile against the twin before this check existed)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from ascendc_harness import build

PRELUDE = '#include <cstdint>\n#include "kernel_operator.h"\n#include "lib/matmul_intf.h"\n'
KERNEL_SOURCES = sorted([*build.ASCENDC.glob("*/op_kernel/*.cpp"), *build.ASCENDC.glob("common/*kernel*.h")])


@dataclass(frozen=True)
class Case:
    bad: str  # rejected by the real API
    good: str  # the form the real API accepts
    token: str  # in an error line g++ prints for `bad`: it failed for the intended reason


VEC = "AscendC::TBuf<AscendC::TPosition::VECCALC>"
QUE = "AscendC::TQue<AscendC::TPosition::VECIN, 1>"
MM = ("using namespace AscendC;\n"  # CubeFormat unqualified, wherever the twin declares it
      "using A = AscendC::MatmulType<AscendC::TPosition::GM, CubeFormat::ND, half>;\n"
      "using C = AscendC::MatmulType<AscendC::TPosition::GM, CubeFormat::ND, float>;\n"
      "using Mm = AscendC::Matmul<A, A, C>;\n")

CASES = {
    # The three the real-API build found (include/basic_api/kernel_common.h, impl/basic_api/utils/
    # kernel_utils_macros.h, include/basic_api/kernel_tpipe.h).
    "GetTPipePtr_is_global": Case(
        "void F() { (void)AscendC::GetTPipePtr(); }",
        "void F() { (void)GetTPipePtr(); }", "GetTPipePtr"),
    "GM_ADDR_list_declares_one_pointer": Case(
        "void F(GM_ADDR x) { GM_ADDR a, b; a = x; b = x;\n"
        "  AscendC::GlobalTensor<float> g; g.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(b), 1); (void)a; }",
        "void F(GM_ADDR x) { GM_ADDR a; GM_ADDR b; a = x; b = x;\n"
        "  AscendC::GlobalTensor<float> g; g.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(b), 1); (void)a; }",
        "uint8_t"),
    "GM_ADDR_list_in_an_io_struct": Case(
        "struct Io { GM_ADDR a, b; };\nvoid F(GM_ADDR x) { const Io io{x, x}; (void)io; }",
        "struct Io { GM_ADDR a; GM_ADDR b; };\nvoid F(GM_ADDR x) { const Io io{x, x}; (void)io; }",
        "uint8_t"),
    "TBuf_Get_through_const_reference": Case(
        f"void F(const {VEC}& b) {{ (void)b.Get<float>(); }}",
        f"void F({VEC}& b) {{ (void)b.Get<float>(); }}", "Get"),
    "TBuf_Get_len_through_const_reference": Case(
        f"void F(const {VEC}& b) {{ (void)b.Get<float>(8); }}",
        f"void F({VEC}& b) {{ (void)b.Get<float>(8); }}", "Get"),
    "TBuf_Get_in_const_member": Case(
        f"struct Ub {{ {VEC} b; AscendC::LocalTensor<float> V() const {{ return b.Get<float>(); }} }};",
        f"struct Ub {{ {VEC} b; AscendC::LocalTensor<float> V() {{ return b.Get<float>(); }} }};", "Get"),
    # Further differences (the API table in docs/ascend.md).
    "FreeTensor_of_a_temporary": Case(
        f"void F({QUE}& q) {{ q.FreeTensor(q.DeQue<float>()); }}",
        f"void F({QUE}& q) {{ AscendC::LocalTensor<float> t = q.DeQue<float>(); q.FreeTensor(t); }}",
        "cannot bind non-const lvalue reference"),
    "FreeTensor_of_a_const_tensor": Case(
        f"void F({QUE}& q, const AscendC::LocalTensor<float>& t) {{ q.FreeTensor(t); }}",
        f"void F({QUE}& q, AscendC::LocalTensor<float>& t) {{ q.FreeTensor(t); }}", "FreeTensor"),
    "FetchEventID_through_const_pipe": Case(
        "void F(const AscendC::TPipe& p) { (void)p.FetchEventID(AscendC::HardEvent::V_S); }",
        "void F(AscendC::TPipe& p) { (void)p.FetchEventID(AscendC::HardEvent::V_S); }", "discards qualifiers"),
    "GlobalTensor_SetValue_through_const": Case(
        "void F(const AscendC::GlobalTensor<float>& g) { g.SetValue(0, 1.0f); }",
        "void F(AscendC::GlobalTensor<float>& g) { g.SetValue(0, 1.0f); }", "discards qualifiers"),
    "GlobalTensor_GetPhyAddr_is_read_only": Case(
        "void F(const AscendC::GlobalTensor<float>& g) { float* p = g.GetPhyAddr(); (void)p; }",
        "void F(const AscendC::GlobalTensor<float>& g) { const float* p = g.GetPhyAddr(); (void)p; }", "const float*"),
    "LocalTensor_from_an_offset": Case(
        "void F() { AscendC::LocalTensor<float> t(0, 8, nullptr); (void)t; }",
        "void F() { AscendC::LocalTensor<float> t; (void)t; }", "private"),
    "DataCopyExtParams_fields_left_out": Case(
        "void F() { const AscendC::DataCopyExtParams p{1, 32}; (void)p; }",
        "void F() { const AscendC::DataCopyExtParams p{1, 32, 0, 0, 0}; (void)p; }", "DataCopyExtParams"),
    "DataCopyPadExtParams_value_left_out": Case(
        "void F() { const AscendC::DataCopyPadExtParams<float> p{false, 0, 0}; (void)p; }",
        "void F() { const AscendC::DataCopyPadExtParams<float> p{false, 0, 0, 0.0f}; (void)p; }",
        "DataCopyPadExtParams"),
    "HardEvent_is_8_bit": Case(
        "void F() { const AscendC::HardEvent e{300}; (void)e; }",
        "void F() { const AscendC::HardEvent e{2}; (void)e; }", "narrowing"),
    "TPosition_is_8_bit": Case(
        "void F() { const AscendC::TPosition p{300}; (void)p; }",
        "void F() { const AscendC::TPosition p{1}; (void)p; }", "narrowing"),
    "RoundMode_is_8_bit": Case(
        "void F() { const AscendC::RoundMode m{300}; (void)m; }",
        "void F() { const AscendC::RoundMode m{1}; (void)m; }", "narrowing"),
    "half_has_no_bits_member": Case(
        "void F() { const half h(1.0f); (void)h.bits; }",
        "void F() { const half h(1.0f); (void)static_cast<float>(h); }", "bits"),
    "GetSysWorkSpacePtr_is_global": Case(
        "void F() { (void)AscendC::GetSysWorkSpacePtr(); }",
        "void F() { (void)GetSysWorkSpacePtr(); }", "GetSysWorkSpacePtr"),
    "CubeFormat_is_global": Case(
        "void F() { const AscendC::CubeFormat f = AscendC::CubeFormat::ND; (void)f; }",
        "void F() { const CubeFormat f = CubeFormat::ND; (void)f; }", "CubeFormat"),
    "REGIST_MATMUL_OBJ_twice_in_one_scope": Case(
        MM + "void F(AscendC::TPipe* p, Mm& a, Mm& b, const TCubeTiling* t) {\n"
        "  REGIST_MATMUL_OBJ(p, GetSysWorkSpacePtr(), a, t);\n  REGIST_MATMUL_OBJ(p, GetSysWorkSpacePtr(), b, t);\n}",
        MM + "void F(AscendC::TPipe* p, Mm& a, Mm& b, const TCubeTiling* t) {\n"
        "  REGIST_MATMUL_OBJ(p, GetSysWorkSpacePtr(), a, t, b, t);\n}", "redeclaration"),
    "REGIST_MATMUL_OBJ_in_a_non_void_function": Case(
        MM + "int F(AscendC::TPipe* p, Mm& a, const TCubeTiling* t) {\n"
        "  REGIST_MATMUL_OBJ(p, GetSysWorkSpacePtr(), a, t);\n  return 0;\n}",
        MM + "void F(AscendC::TPipe* p, Mm& a, const TCubeTiling* t) {\n"
        "  REGIST_MATMUL_OBJ(p, GetSysWorkSpacePtr(), a, t);\n}", "return-statement with no value"),
    "REGIST_MATMUL_OBJ_as_an_expression": Case(
        MM + "void F(AscendC::TPipe* p, Mm& a, const TCubeTiling* t) {\n"
        "  (void)(REGIST_MATMUL_OBJ(p, GetSysWorkSpacePtr(), a, t));\n}",
        MM + "void F(AscendC::TPipe* p, Mm& a, const TCubeTiling* t) {\n"
        "  REGIST_MATMUL_OBJ(p, GetSysWorkSpacePtr(), a, t);\n}", "expected primary-expression"),
    "ASCEND_IS_AIV_inside_an_expression": Case(
        "void F(int x) { if (ASCEND_IS_AIV && x == 0) { AscendC::SyncAll(); } }",
        "void F(int x) { if ASCEND_IS_AIV { if (x == 0) { AscendC::SyncAll(); } } }", "expected primary-expression"),
    "ASCEND_IS_AIC_as_a_value": Case(
        "bool F() { const bool aic = ASCEND_IS_AIC; return aic; }",
        "bool F() { if ASCEND_IS_AIC { return true; } return false; }", "expected primary-expression"),
    "TILING_KEY_IS_of_a_scoped_enum": Case(
        "enum class Key : uint64_t { kHalf = 0 };\nbool F() { return TILING_KEY_IS(Key::kHalf); }",
        "enum class Key : uint64_t { kHalf = 0 };\n"
        "bool F() { return TILING_KEY_IS(static_cast<uint64_t>(Key::kHalf)); }",
        "operator=="),
    "twin_helpers_are_not_AscendC_API": Case(
        "void F() { (void)AscendC::ReduceSumWorkElems<float>(64); }",
        "void F(const AscendC::LocalTensor<float>& d, const AscendC::LocalTensor<float>& s,\n"
        "       const AscendC::LocalTensor<float>& work) { AscendC::ReduceSum(d, s, work, 64); }",
        "ReduceSumWorkElems"),
    "twin_core_query_is_not_AscendC_API": Case(
        "bool F() { return AscendC::TwinIsAic(); }",
        "bool F() { if ASCEND_IS_AIC { return true; } return false; }", "TwinIsAic"),
}


def _twin_dir() -> Path:
    return Path(os.environ.get("MGO_TWIN_INCLUDE", build.ASCENDC / "twin"))


def _gxx(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    cxx = shutil.which(os.environ.get("CXX", "g++"))
    if cxx is None:
        raise RuntimeError("no C++ compiler (g++) found: the Ascend C twin tests need one")
    flags = [f for f in build.CXXFLAGS if not f.startswith("-I")]
    # C locale: plain quotes in the messages the tokens are matched against.
    env = {**os.environ, "LC_ALL": "C"}
    return subprocess.run([cxx, *flags, f"-I{_twin_dir()}", *args], input=stdin, capture_output=True, text=True,
                          env=env, check=False)


@pytest.fixture(scope="module")
def prelude(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The twin's headers, precompiled once: each snippet's g++ then parses little more than itself."""
    header = tmp_path_factory.mktemp("twin_api") / "prelude.h"
    header.write_text(PRELUDE)
    pch = _gxx("-x", "c++-header", str(header), "-o", f"{header}.gch")
    assert pch.returncode == 0, f"the twin's headers do not compile:\n{pch.stderr}"
    return header


def _compile(body: str, prelude: Path) -> subprocess.CompletedProcess[str]:
    return _gxx("-include", str(prelude), "-fsyntax-only", "-x", "c++", "-", stdin=body + "\n")


@pytest.mark.parametrize("name", sorted(CASES))
def test_twin_rejects_what_the_real_api_rejects(name: str, prelude: Path) -> None:
    case = CASES[name]
    result = _compile(case.bad, prelude)
    assert result.returncode != 0, f"{name}: the twin accepts code the real Ascend C API rejects:\n{case.bad}"
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert any(case.token in line for line in errors), f"{name}: rejected for another reason:\n{result.stderr}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_twin_accepts_the_correct_form(name: str, prelude: Path) -> None:
    result = _compile(CASES[name].good, prelude)
    assert result.returncode == 0, f"{name}: the correct form does not compile against the twin:\n{result.stderr}"


def _code_only(source: str) -> str:
    """The source without comments and string literals."""
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"', " ", source, flags=re.S)


@pytest.mark.parametrize("path", KERNEL_SOURCES, ids=lambda p: str(p.relative_to(build.ASCENDC)))
def test_kernels_name_no_twin_internals(path: Path) -> None:
    # The twin's own helpers (namespace AscendC::twin, Twin* members) exist only on the CPU: a
    # kernel naming one compiles against the twin and not against the real API.
    found = re.findall(r"\b(?:twin|Twin\w*)\b", _code_only(path.read_text()))
    assert not found, f"{path} uses the twin's internals {sorted(set(found))}"
