"""scripts/build_ascend.sh: without CANN it refuses clearly (one stderr line, exit code 2, nothing
built); its staging step (flattening sources for the CANN op project) keeps every include
resolvable, and the staged kernels still compile against the twin."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from _paths import ASCEND
from _paths import ROOT as REPO

from ms_grad_ops._specs import OP_SPECS

SCRIPT = REPO / "scripts" / "build_ascend.sh"
# The ops the script builds: every op registered for Ascend.
OPS = tuple(sorted(name for name, spec in OP_SPECS.items() if spec.ascend_dtypes))
CANN_HEADERS = ("kernel_operator.h", "lib/matmul_intf.h", "register/op_def_registry.h",
                "tiling/platform/platform_ascendc.h")


def run(args: list[str], env_changes: dict[str, str | None], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["MGO_BUILD_DIR"] = str(tmp_path / "build")
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.mark.parametrize("home", [None, "", "/nonexistent/cann", "EMPTY_DIR"])
def test_without_cann_exits_2_with_one_message(home: str | None, tmp_path: Path) -> None:
    vendors = REPO / "ms_grad_ops" / "vendors"
    before = sorted(vendors.iterdir()) if vendors.exists() else None
    if home == "EMPTY_DIR":
        home = str(tmp_path / "not_cann")
        os.mkdir(home)
    result = run([], {"ASCEND_HOME_PATH": home}, tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "CANN" in lines[0] and "ASCEND_HOME_PATH" in lines[0]
    assert not (tmp_path / "build").exists(), "nothing may be built without CANN"
    assert (sorted(vendors.iterdir()) if vendors.exists() else None) == before


def test_help_and_bad_arguments(tmp_path: Path) -> None:
    assert run(["--help"], {}, tmp_path).returncode == 0
    assert "ASCEND_HOME_PATH" in run(["--help"], {}, tmp_path).stdout
    assert run(["--bogus"], {}, tmp_path).returncode == 1


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("stage")
    result = subprocess.run(["bash", str(SCRIPT), "--stage-only", str(dest)], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return dest


@pytest.mark.parametrize("part", ["op_host", "op_kernel"])
def test_staged_includes_resolve(staged: Path, part: str) -> None:
    files = sorted((staged / part).iterdir())
    assert {f"{op}.cpp" for op in OPS} <= {f.name for f in files}
    for f in files:
        for inc in re.findall(r'^#include "([^"]+)"', f.read_text(), flags=re.M):
            assert inc in CANN_HEADERS or (staged / part / inc).is_file(), f"{part}/{f.name}: unresolved {inc}"


def test_staged_kernels_compile_against_the_twin(staged: Path, tmp_path: Path) -> None:
    cxx = shutil.which("g++")
    assert cxx, "g++ is required"
    unit = tmp_path / "all_kernels.cpp"  # one translation unit: one compiler start-up, not four
    unit.write_text("".join(f'#include "{staged / "op_kernel" / op}.cpp"\n' for op in OPS))
    result = subprocess.run([cxx, "-std=c++17", "-fsyntax-only", f"-I{REPO / 'ascendc' / 'twin'}", str(unit)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_staged_op_host_compiles_against_the_api_stub(staged: Path, tmp_path: Path) -> None:
    # The flattened op_host sources against tests/ascend/cann_stub (the documented CANN API subset they
    # use, not CANN): the rewritten includes and the adapter still form one valid program.
    cxx = shutil.which("g++")
    assert cxx, "g++ is required"
    unit = tmp_path / "all_op_host.cpp"
    unit.write_text("".join(f'#include "{staged / "op_host" / op}.cpp"\n' for op in OPS))
    stub = ASCEND / "cann_stub"
    result = subprocess.run([cxx, "-std=c++17", "-fsyntax-only", f"-I{stub}", str(unit)], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_script_builds_exactly_the_packaged_ops(staged: Path) -> None:
    # The script takes its op list from the generated OpDefs (ascendc/<op>/op_host/<op>_def.h).
    kernels = sorted(f.name.removesuffix(".cpp") for f in (staged / "op_kernel").glob("*.cpp"))
    assert kernels == list(OPS)
