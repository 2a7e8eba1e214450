"""scripts/check_ascend_api.py: every kernel against the real, open Ascend C API headers (asc-devkit).

The full check needs an asc-devkit tree (``ASC_DEVKIT``) and is skipped without one (CI has none);
the script's own logic (arguments, errors, the build list, the devkit staging) and the repository's
stand-ins for CANN's closed headers are tested here without it."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from _paths import ROOT, SCRIPTS

SCRIPT = SCRIPTS / "check_ascend_api.py"
STUBS = ROOT / "ascendc" / "api_check" / "stubs"
DEVKIT = os.environ.get("ASC_DEVKIT", "")


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_ascend_api", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module's annotations through it
    spec.loader.exec_module(module)
    return module


api = _module()


def run(*args: str, env_devkit: str | None = None, timeout: int = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ASC_DEVKIT"}
    if env_devkit is not None:
        env["ASC_DEVKIT"] = env_devkit
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.mark.skipif(not DEVKIT, reason="ASC_DEVKIT not set: the real Ascend C API check needs an asc-devkit tree "
                                       "(include/, impl/); CI has no copy")
def test_every_kernel_compiles_against_the_real_api() -> None:
    proc = run("--asc-devkit", DEVKIT, timeout=3600)
    lines = proc.stdout.splitlines()
    assert len(lines) == len(api.builds()), proc.stdout + proc.stderr
    failed = [ln for ln in lines if not ln.endswith(" OK")]
    assert not failed and proc.returncode == 0, "\n".join(failed) + proc.stderr


def test_help_documents_the_options() -> None:
    proc = run("--help")
    assert proc.returncode == 0
    for word in ("--asc-devkit", "ASC_DEVKIT", "--commit", "--jobs", "--kernels", "2201", "3510", "stub_def.h"):
        assert word in proc.stdout, word


def test_without_a_devkit_exits_2_with_one_message() -> None:
    proc = run()
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and "ASC_DEVKIT" in proc.stderr


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_missing_devkit_directory_exits_2(how: str, tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-devkit")
    proc = run("--asc-devkit", missing) if how == "argument" else run(env_devkit=missing)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "does not exist" in proc.stderr and missing in proc.stderr


def test_an_unknown_kernel_exits_2_naming_it() -> None:
    proc = run("--kernels", "rope", "no_such_kernel")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "no_such_kernel" in proc.stderr and "rope," not in proc.stderr


def test_a_directory_that_is_not_a_devkit_exits_2(tmp_path: Path) -> None:
    proc = run("--asc-devkit", str(tmp_path))
    assert proc.returncode == 2 and proc.stdout == ""
    assert "is not an asc-devkit tree" in proc.stderr and "kernel_operator.h" in proc.stderr


def test_the_builds_cover_every_kernel_arch_and_core_kind() -> None:
    kernels = sorted(ROOT.glob("ascendc/*/op_kernel/*.cpp"))
    assert len(kernels) >= 9
    got = {(b.kernel, b.arch, b.kind) for b in api.builds()}
    assert got == {(k, a, c) for k in kernels for a in ("2201", "3510") for c in ("vector", "cube")}
    assert len(api.builds()) == len(got)


@pytest.mark.parametrize(("arch", "kind", "macros"), [
    ("2201", "vector", ["-D__NPU_ARCH__=2201", "-D__DAV_C220__", "-D__DAV_C220_VEC__"]),
    ("2201", "cube", ["-D__NPU_ARCH__=2201", "-D__DAV_C220__", "-D__DAV_C220_CUBE__"]),
    ("3510", "vector", ["-D__NPU_ARCH__=3510", "-D__DAV_C310__", "-D__DAV_C310_VEC__"]),
    ("3510", "cube", ["-D__NPU_ARCH__=3510", "-D__DAV_C310__", "-D__DAV_C310_CUBE__"]),
])
def test_the_cpu_debug_configuration_of_each_build(arch: str, kind: str, macros: list[str]) -> None:
    build = next(b for b in api.builds() if b.arch == arch and b.kind == kind)
    cmd = api.command(build, ["-isystem", "/devkit/include"])
    assert cmd[:3] == ["g++", "-std=c++17", "-fsyntax-only"]
    assert {"-DASCENDC_CPU_DEBUG=1", "-DASCENDC_DEBUG=1", "-DASCENDC_DUMP=0"} <= set(cmd)
    assert all(m in cmd for m in macros) and cmd[-1] == str(build.kernel)
    assert cmd[cmd.index("-include") + 1] == str(STUBS / "tiling_data.h")


def test_every_kernel_registers_its_tiling_struct() -> None:
    # The stand-in GET_TILING_DATA declares the struct REGISTER_TILING_DEFAULT names.
    for build in api.builds():
        struct = build.tiling_struct()
        assert struct and struct.startswith("mgo::tiling::"), build.kernel


def test_first_error_is_the_first_error_line() -> None:
    log = "In file included from a.h:1,\nb.h:2:3: error: 'x' was not declared\nb.h:4:5: error: later\n"
    assert api.first_error(log) == "b.h:2:3: error: 'x' was not declared"
    assert api.first_error("") == "g++ failed without output"


def test_staging_lays_out_the_install_links_without_writing_into_the_devkit(tmp_path: Path) -> None:
    devkit = tmp_path / "devkit"
    for rel in ("include/kernel_operator.h", "include/adv_api/matmul/matmul_intf.h", "include/adv_api/math/sin.h",
                "include/adv_api/index/arith.h"):
        (devkit / rel).parent.mkdir(parents=True, exist_ok=True)
        (devkit / rel).write_text("")
    cmake = devkit / "impl/adv_api/cmake/kernel_headers.cmake"
    cmake.parent.mkdir(parents=True)
    cmake.write_text("file(CREATE_LINK matmul/matmul_intf.h\n  ${ASCENDC_INSTALL_BASE_PATH}/asc/include/adv_api/"
                     "matmul_intf.h SYMBOLIC)\nfile(CREATE_LINK ../index/arith.h ${ASCENDC_INSTALL_BASE_PATH}/asc/"
                     "include/adv_api/math/arith.h SYMBOLIC)\n")
    generator = devkit / "impl/adv_api/cmake/scripts/gen_kernel_tiling_data_def.py"
    generator.parent.mkdir(parents=True)
    generator.write_text("import sys\nopen(sys.argv[2], 'w').write('// tiling ' + sys.argv[1])\n")
    before = sorted(str(p) for p in devkit.rglob("*"))
    api.check_devkit(devkit)
    staged = api.stage(devkit, tmp_path / "stage")
    assert (staged / "lib" / "matmul_intf.h").resolve() == devkit / "include/adv_api/matmul/matmul_intf.h"
    assert (staged / "lib" / "math" / "arith.h").resolve() == devkit / "include/adv_api/index/arith.h"
    assert (staged / "lib" / "math" / "sin.h").resolve() == devkit / "include/adv_api/math/sin.h"
    assert (staged / "kernel_tiling" / "kernel_tiling.h").read_text().startswith("// tiling ")
    assert sorted(str(p) for p in devkit.rglob("*")) == before
    flags = api.include_flags(devkit, staged)
    assert flags[:4] == ["-isystem", str(STUBS), "-isystem", str(staged)]


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_the_stand_ins_compile_on_their_own() -> None:
    for header in ("stub_def.h", "stub_fun.h", "simt_stub.h", "kernel_simt_cpu.h", "tiling_data.h"):
        proc = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-DASCENDC_CPU_DEBUG=1", "-x", "c++",
                               "-I", str(STUBS), str(STUBS / header)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, header + proc.stderr
