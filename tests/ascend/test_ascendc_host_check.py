"""scripts/check_ascend_host.py: every op_host source against CANN's real host API (syntax in the
three OP_ADD expansions; registration, InferShape, InferDataType and Tiling on real contexts per SoC).

The full check needs checkouts of hicann/metadef, hicann/runtime, mirror-cann/asc-devkit and
openeuler-mirror/libboundscheck (CANN_METADEF, CANN_RUNTIME, ASC_DEVKIT, LIBBOUNDSCHECK) and protobuf,
and is skipped without them (CI has none); the script's own logic (arguments, errors, the build list,
its command lines, its per-op cases, run here on the stand-in) is tested without them."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _paths import ROOT, SCRIPTS
from test_ascendc_op_host import CANN_ENV, NO_CANN, expected_platform, host_check, stand_in_driver

SCRIPT = SCRIPTS / "check_ascend_host.py"
hc = host_check()
OP_HOST_SOURCES = sorted(ROOT.glob("ascendc/*/op_host/*.cpp"))


def run(*args: str, env: dict[str, str] | None = None, timeout: int = 60) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in CANN_ENV}
    return subprocess.run([sys.executable, str(SCRIPT), *args], env={**base, **(env or {})}, capture_output=True,
                          text=True, timeout=timeout, check=False)


@pytest.mark.skipif(not all(os.environ.get(v) for v in CANN_ENV) or shutil.which("protoc") is None, reason=NO_CANN)
def test_every_op_host_compiles_registers_infers_and_tiles_on_the_real_libraries() -> None:
    proc = run(env={v: os.environ[v] for v in CANN_ENV}, timeout=3600)
    lines = proc.stdout.splitlines()
    header = [ln for ln in lines if ln.startswith("# ")]
    assert [ln.split()[1] for ln in header[:4]] == ["metadef", "runtime", "asc-devkit", "libboundscheck"]
    syntax = [ln for ln in lines if ln.split()[1:2] and ln.split()[1] in hc.EXPANSIONS]
    assert len(syntax) == 3 * len(OP_HOST_SOURCES), proc.stdout + proc.stderr
    runs = [ln for ln in lines if ln.split()[1:2] and ln.split()[1] in hc.SOCS]
    ops = [name for name, spec in hc.load_specs().OP_SPECS.items() if spec.ascend_dtypes]
    assert len(runs) == len(ops) * len(hc.SOCS), proc.stdout + proc.stderr
    failed = [ln for ln in syntax + runs if " OK" not in ln]
    assert not failed and proc.returncode == 0, "\n".join(failed) + proc.stderr


def test_help_documents_the_options() -> None:
    proc = run("--help")
    assert proc.returncode == 0
    for word in ("--metadef", "--runtime", "--asc-devkit", "--libboundscheck", "CANN_METADEF", "CANN_RUNTIME",
                 "ASC_DEVKIT", "LIBBOUNDSCHECK", "--build-dir", "--socs", "OP_PROTO_LIB", "OP_TILING_LIB",
                 "-fno-access-control", "libprotobuf-dev"):
        assert word in proc.stdout, word


def test_without_sources_exits_2_with_one_message() -> None:
    proc = run()
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and "CANN_METADEF" in proc.stderr


def test_a_directory_that_is_not_a_checkout_exits_2(tmp_path: Path) -> None:
    proc = run("--metadef", str(tmp_path), "--runtime", str(tmp_path), "--asc-devkit", str(tmp_path),
               "--libboundscheck", str(tmp_path))
    assert proc.returncode == 2 and proc.stdout == ""
    assert "is not a metadef checkout" in proc.stderr and "op_def_registry.h" in proc.stderr


def test_the_syntax_builds_cover_every_source_in_the_three_expansions() -> None:
    assert len(OP_HOST_SOURCES) == len(hc.op_host_sources()) >= 11
    sources = hc.Sources(Path("/m"), Path("/r"), Path("/d"), Path("/b"))
    for expansion, define in zip(hc.EXPANSIONS, ([], ["-DOP_PROTO_LIB"], ["-DOP_TILING_LIB"])):
        cmd = hc.syntax_command(OP_HOST_SOURCES[0], expansion, sources)
        assert cmd[:3] == ["g++", "-std=c++17", "-fsyntax-only"] and cmd[-1] == str(OP_HOST_SOURCES[0])
        assert {"-Dgoogle=ascend_private", "-DOS_TYPE=0", "-DNO_METADEF_ABI_COMPATIABLE",
                "-DNO_OPERATOR_IMPL"} <= set(cmd)
        assert [f for f in cmd if f.startswith("-DOP_")] == define
        assert "-I/m/inc/external/asc" in cmd and "-I/d/include/utils" in cmd and "-I/b/include" in cmd


def test_first_error_skips_canns_deprecation_notes() -> None:
    log = ("ge_error_codes.h:15: note: '#pragma message: Warning: ge_error_codes.h is deprecated'\n"
           "op_host_common.h:46:9: error: 'const struct gert::Shape' has no member named 'IsUnknownRank'\n")
    assert hc.first_error(log).endswith("has no member named 'IsUnknownRank'")
    assert hc.first_error("") == "failed without output"


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stand_in_driver(tmp_path_factory.mktemp("host_check"))


@pytest.mark.parametrize("soc", hc.SOCS)
def test_the_checks_cases_run_on_the_stand_in_at_every_socs_core_count(stand_in: Path, soc: str) -> None:
    # The script's one case per op: every step succeeds, and it is large enough that the block dim
    # is the SoC's core count (vector kernels: AIVs; mixed kernels: AICs).
    specs = hc.load_specs()
    cases = hc.op_cases()
    assert set(cases) == {name for name, spec in specs.OP_SPECS.items() if spec.ascend_dtypes}
    vector = {"rope", "rope_grad", "cla_gate_merge", "cla_gate_backward"}
    for op, (inputs, attrs) in cases.items():
        spec = specs.OP_SPECS[op]
        assert len(inputs) == len(spec.inputs) and set(attrs) <= {a.name for a in spec.attrs}, op
        for step in ("shape", "dtype", "tiling"):
            code, out, err = hc.run_driver(stand_in, hc.case_stdin(spec, step, inputs, attrs), soc)
            assert code == 0 and out.startswith("ok "), f"{op} {step}: {out} {err}"
        cores = expected_platform(soc)["aiv" if op in vector else "aic"]
        assert f" block_dim={cores} " in out, f"{op} on {soc}: {out}"
