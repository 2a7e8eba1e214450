"""Check every op_host source against CANN's REAL host API: compile, register, infer and tile.

    python scripts/check_ascend_host.py --metadef DIR --runtime DIR --asc-devkit DIR --libboundscheck DIR
    CANN_METADEF=... CANN_RUNTIME=... ASC_DEVKIT=... LIBBOUNDSCHECK=... python scripts/check_ascend_host.py

The four sources are public checkouts (never copied into this repository): hicann/metadef (the graph
engine's host API: OpDef, OP_ADD, the exe_graph contexts and their builders), hicann/runtime (the
platform library and the SoC .ini files), mirror-cann/asc-devkit (platform_ascendc::PlatformAscendC)
and openeuler-mirror/libboundscheck (securec). protobuf comes from the system (Debian:
libprotobuf-dev, protobuf-compiler): runtime's platform library parses its .proto.

1. Syntax: every ``ascendc/<op>/op_host/*.cpp`` with ``g++ -std=c++17 -fsyntax-only`` against the
   real headers, in the three expansions of OP_ADD CANN's build compiles (default: the OpDef for
   OpDefFactory; ``-DOP_PROTO_LIB``: InferShape / InferDataType; ``-DOP_TILING_LIB``: Tiling,
   TilingParse and the op-check hooks), with CANN's defines ``-Dgoogle=ascend_private -DOS_TYPE=0
   -DNO_METADEF_ABI_COMPATIABLE -DNO_OPERATOR_IMPL``.
2. Libraries: the host parts of metadef (opdef, registry, exe_graph runtime, context builders),
   runtime's platform library (its .proto through protoc), asc-devkit's platform_ascendc.cpp,
   libboundscheck and runtime's mmpa, compiled out of tree with plain g++ (metadef's own CMake
   downloads its dependencies and needs an installed CANN). Objects are cached in ``--build-dir``
   (default ``$MGO_HOST_CHECK_DIR`` or ``~/.cache/ms_grad_ops/host_check``), keyed by source,
   flags and the checkouts' commits. The two files that use protobuf are built with
   ``-Dascend_private=google`` instead: CANN ships protobuf renamed, Debian's is ``google::protobuf``.
3. Driver: ``ascendc/host_check/op_host_driver.cpp`` (``-fno-access-control``, as CANN's own op unit
   tests: the OpDef getters are private) linked with all op_host sources once per expansion and with
   ``ascendc/host_check/closed_logs.cpp`` (CANN's closed log symbols). Next to it,
   ``data/platform_config`` links runtime's SoC .ini files, where CANN's PlatformInfoManager looks.
4. Run: for every op and SoC (default Ascend910B1, Ascend910B4, Ascend910_9392, Ascend950PR_9599;
   a SoC without an .ini in the runtime checkout is reported SKIP), the op's real registration is
   read back (all three paths registered) and one case runs through InferShape, InferDataType and
   Tiling on contexts made by CANN's OpInferShapeContextBuilder, OpInferDataTypeContextBuilder and
   OpTilingContextBuilder (the SoC's fe::PlatFormInfos from PlatformInfoManager).

Output: ``# <source> <commit>`` for each checkout, then one line per build, ``<op> <expansion> OK``
or ``... FAIL <first error>``, then one line per op and SoC, ``<op> <soc> OK block_dim=..
tiling_key=.. workspace=..`` or ``<op> <soc> FAIL <step>: <why>`` (``<soc> SKIP ...`` for a
missing .ini), then ``# <seconds> s``. Exit code 0 when everything passes, 1 when something
fails, 2 when a source or tool is missing. tests/ascend/test_ascendc_op_host.py runs its cases
on the driver this builds when the four variables are set.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
HOST_CHECK = ROOT / "ascendc" / "host_check"
EXPANSIONS = ("default", "OP_PROTO_LIB", "OP_TILING_LIB")
DEFINES = ("-Dgoogle=ascend_private", "-DOS_TYPE=0", "-DNO_METADEF_ABI_COMPATIABLE", "-DNO_OPERATOR_IMPL")
# CANN names its private protobuf copy ascend_private; the system's is google::protobuf.
PROTOBUF_DEFINES = ("-Dascend_private=google", "-DOS_TYPE=0", "-DNO_METADEF_ABI_COMPATIABLE", "-DNO_OPERATOR_IMPL")
SOCS = ("Ascend910B1", "Ascend910B4", "Ascend910_9392", "Ascend950PR_9599")
SOURCES = {  # name: (argument, environment variable, a file that must exist)
    "metadef": ("--metadef", "CANN_METADEF", "inc/external/asc/register/op_def_registry.h"),
    "runtime": ("--runtime", "CANN_RUNTIME", "src/platform/platform_info.cpp"),
    "asc-devkit": ("--asc-devkit", "ASC_DEVKIT", "impl/utils/tiling/platform/platform_ascendc.cpp"),
    "libboundscheck": ("--libboundscheck", "LIBBOUNDSCHECK", "include/securec.h"),
}
INI_DIRS = ("src/platform/platform_config/cann", "src/platform/platform_config/cann-dev")
PROTO = Path("src/platform/proto/platform_infos.proto")


class SetupError(Exception):
    """A source checkout or a tool is missing."""


@dataclass(frozen=True)
class Sources:
    """The four checkouts."""

    metadef: Path
    runtime: Path
    devkit: Path
    boundscheck: Path

    def by_name(self) -> dict[str, Path]:
        return {"metadef": self.metadef, "runtime": self.runtime, "asc-devkit": self.devkit,
                "libboundscheck": self.boundscheck}

    def includes(self, generated: Path | None = None) -> list[str]:
        """The host include directories, as CANN's own host builds list them."""
        m, r = self.metadef, self.runtime
        dirs = [m / "base", m, m / "inc", m / "inc/external", m / "inc/external/asc", m / "inc/external/base",
                m / "pkg_inc", m / "pkg_inc/base", r / "pkg_inc", r / "pkg_inc/platform", r / "pkg_inc/mmpa",
                r / "pkg_inc/mmpa/sub_inc", r / "pkg_inc/base", r / "include", r / "include/dfx",
                r / "include/dfx/base", r / "include/external", r / "src/platform", self.boundscheck / "include",
                self.devkit / "include/utils", self.devkit / "include/utils/tiling/platform"]
        if generated is not None:
            dirs += [generated, generated / "proto"]
        return [f"-I{d}" for d in dirs]


def commit(checkout: Path) -> str:
    """The checkout's git HEAD, else 'unknown'."""
    proc = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=False)
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else "unknown"


def resolve_sources(args: argparse.Namespace) -> Sources:
    """The checkouts from the arguments or the environment; SetupError names what is missing."""
    found: dict[str, Path] = {}
    for name, (flag, env, probe) in SOURCES.items():
        given = getattr(args, flag.lstrip("-").replace("-", "_")) or os.environ.get(env)
        if not given:
            raise SetupError(f"no {name} checkout: pass {flag} DIR or set {env}")
        path = Path(given).resolve()
        if not (path / probe).is_file():
            raise SetupError(f"{path} is not a {name} checkout: missing {probe}")
        found[name] = path
    return Sources(found["metadef"], found["runtime"], found["asc-devkit"], found["libboundscheck"])


def check_tools(cxx: str) -> None:
    """SetupError unless the compiler, protoc and the protobuf headers are there."""
    for tool in (cxx, "protoc", "gcc"):
        if shutil.which(tool) is None:
            raise SetupError(f"{tool} not found (protobuf: apt-get install libprotobuf-dev protobuf-compiler)")
    probe = subprocess.run([cxx, "-std=c++17", "-fsyntax-only", "-x", "c++", "-"], input="#include "
                           "<google/protobuf/message.h>\n", capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        raise SetupError("the protobuf headers are missing (apt-get install libprotobuf-dev protobuf-compiler)")


# ---------------------------------------------------------------- 1. syntax
def op_host_sources(root: Path = ROOT) -> list[Path]:
    """Every op_host source, ``ascendc/<op>/op_host/*.cpp``."""
    return sorted(root.glob("ascendc/*/op_host/*.cpp"))


def expansion_flags(expansion: str) -> list[str]:
    return [] if expansion == "default" else [f"-D{expansion}"]


def syntax_command(src: Path, expansion: str, sources: Sources, cxx: str = "g++") -> list[str]:
    return [cxx, "-std=c++17", "-fsyntax-only", *DEFINES, *expansion_flags(expansion), *sources.includes(),
            str(src)]


def first_error(log: str) -> str:
    """The first ``error:`` line of a g++ log (CANN's deprecation pragmas say 'error' too), or its first line."""
    lines = log.strip().splitlines()
    return next((ln for ln in lines if ": error:" in ln or "undefined reference" in ln),
                lines[0] if lines else "failed without output")


def run(cmd: list[str], cwd: Path | None = None) -> tuple[bool, str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=cwd)
    return proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------- 2. the host libraries
def library_sources(s: Sources, generated: Path) -> list[tuple[Path, str]]:
    """(source, kind) of the host library parts the driver links: kind c (libboundscheck, mmpa),
    pb (the two protobuf users), cxx (the rest)."""
    m, r = s.metadef, s.runtime
    cxx = [*sorted((m / "base/asc/opdef").glob("*.cc")), *sorted((m / "base/asc/opcheck").glob("*.cc")),
           *sorted((m / "base/registry").glob("*.cc")), *sorted((m / "base/context_builder").glob("*.cc")),
           *sorted((m / "base/runtime").glob("*.cc")), *sorted((m / "base/utils").glob("*.cc")),
           *sorted((m / "base/type").glob("*.cc")), m / "base/any_value.cc", m / "base/asc/tilingdata_base_impl.cc",
           m / "base/common/plugin/plugin_manager.cc",
           *(r / "src/platform" / f for f in ("platform_info.cpp", "platform_infos_impl.cpp",
                                               "platform_infos_utils.cpp", "platform_manager_v2.cpp")),
           s.devkit / "impl/utils/tiling/platform/platform_ascendc.cpp"]
    pb = [r / "src/platform/platform_infos_def.cpp", generated / "proto" / "platform_infos.pb.cc"]
    c = [*sorted((s.boundscheck / "src").glob("*.c")), *sorted((r / "src/mmpa/src").glob("mmpa_linux*.c"))]
    return [(p, "cxx") for p in cxx] + [(p, "pb") for p in pb] + [(p, "c") for p in c]


def object_command(src: Path, kind: str, s: Sources, generated: Path, out: Path, cxx: str = "g++") -> list[str]:
    if kind == "c":
        return ["gcc", "-O1", "-fPIC", "-w", "-DOS_TYPE=0", f"-I{s.boundscheck / 'include'}",
                f"-I{s.runtime / 'pkg_inc/mmpa'}", f"-I{s.runtime / 'pkg_inc/mmpa/sub_inc'}", "-c", str(src), "-o",
                str(out)]
    defines = PROTOBUF_DEFINES if kind == "pb" else DEFINES
    return [cxx, "-std=c++17", "-O1", "-fPIC", "-w", *defines, *s.includes(generated), "-c", str(src), "-o", str(out)]


def cache_key(cmd: list[str], src: Path, commits: str) -> str:
    h = hashlib.sha256(src.read_bytes())
    h.update(" ".join(cmd[:-3]).encode())  # the flags, not the output path
    h.update(commits.encode())
    return h.hexdigest()[:16]


def build_libraries(s: Sources, build: Path, jobs: int, cxx: str) -> list[Path]:
    """The host library objects (cached in ``build``/obj); RuntimeError names the first that fails."""
    generated = build / "generated"
    (generated / "proto").mkdir(parents=True, exist_ok=True)
    ok, log = run(["protoc", f"--cpp_out={generated / 'proto'}", f"-I{s.runtime / PROTO.parent}",
                   str(s.runtime / PROTO)])
    if not ok:
        raise RuntimeError(f"protoc failed: {first_error(log)}")
    commits = " ".join(commit(p) for p in s.by_name().values())
    objdir = build / "obj"
    objdir.mkdir(parents=True, exist_ok=True)
    todo: list[tuple[list[str], Path]] = []
    objects = []
    for src, kind in library_sources(s, generated):
        cmd = object_command(src, kind, s, generated, Path("OUT"), cxx)
        out = objdir / f"{src.stem}-{cache_key(cmd, src, commits)}.o"
        objects.append(out)
        if not out.is_file():
            todo.append((object_command(src, kind, s, generated, out.with_suffix(".tmp"), cxx), out))

    def one(item: tuple[list[str], Path]) -> str | None:
        cmd, out = item
        ok, log = run(cmd)
        if not ok:
            return f"{cmd[-3]}: {first_error(log)}"
        out.with_suffix(".tmp").rename(out)
        return None

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        errors = [e for e in pool.map(one, todo) if e]
    if errors:
        raise RuntimeError(errors[0])
    return objects


# ---------------------------------------------------------------- 3. the driver
def link_platform_config(s: Sources, build: Path) -> Path:
    """``build``/data/platform_config with a link to every SoC .ini of the runtime checkout: where
    PlatformInfoManager looks (``<executable dir>/../data/platform_config``)."""
    config = build / "data" / "platform_config"
    if config.exists():
        shutil.rmtree(config)
    config.mkdir(parents=True)
    for d in INI_DIRS:
        for ini in sorted((s.runtime / d).glob("*.ini")):
            (config / ini.name).symlink_to(ini)
    return config


def build_driver(s: Sources, build: Path, jobs: int = 2, cxx: str = "g++", root: Path = ROOT) -> Path:
    """Builds (libraries cached) and returns ``build``/bin/driver; RuntimeError says what failed."""
    build.mkdir(parents=True, exist_ok=True)
    objects = build_libraries(s, build, jobs, cxx)
    ours = build / "ours"
    ours.mkdir(exist_ok=True)
    units = []
    for expansion in EXPANSIONS:  # every op_host source once per OP_ADD expansion, as CANN links them
        unit = ours / f"op_host_{expansion}.cpp"
        unit.write_text("".join(f'#include "{src}"\n' for src in op_host_sources(root)))
        units.append((unit, expansion_flags(expansion), []))
    units.append((root / "ascendc/host_check/op_host_driver.cpp", [], ["-fno-access-control"]))
    units.append((root / "ascendc/host_check/closed_logs.cpp", [], []))

    def one(unit: tuple[Path, list[str], list[str]]) -> tuple[Path, str | None]:
        src, defines, extra = unit
        out = ours / f"{src.stem}.o"
        ok, log = run([cxx, "-std=c++17", "-O1", "-fPIC", "-Wall", "-Wno-unknown-pragmas", *extra, *DEFINES,
                       *defines, *s.includes(build / "generated"), "-c", str(src), "-o", str(out)])
        return out, None if ok else f"{src.name} {' '.join(defines)}: {first_error(log)}"

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(one, units))
    errors = [e for _, e in results if e]
    if errors:
        raise RuntimeError(errors[0])
    (build / "bin").mkdir(exist_ok=True)
    driver = build / "bin" / "driver"
    ok, log = run([cxx, "-o", str(driver), *(str(o) for o, _ in results), *(str(o) for o in objects),
                   "-lprotobuf", "-ldl", "-lpthread"])
    if not ok:
        raise RuntimeError(f"link: {first_error(log)}")
    link_platform_config(s, build)
    return driver


# ---------------------------------------------------------------- 4. the run
def load_specs(root: Path = ROOT) -> ModuleType:
    """ms_grad_ops/_specs.py by path (plain Python: no package import, no MindSpore)."""
    spec = importlib.util.spec_from_file_location("mgo_specs_for_host_check", root / "ms_grad_ops" / "_specs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


GE_CODES = {"float16": 1, "bfloat16": 27, "float32": 0, "int32": 3, "int64": 9}
ATTR_KINDS = {"str": "s", "int": "i", "float": "f", "bool": "b"}
Input = tuple[list[int], str] | None  # (shape, dtype); None: an omitted OPTIONAL input


def op_cases(t1: int = 256, t2: int = 512) -> dict[str, tuple[list[Input], dict[str, object]]]:
    """One case per op: bfloat16, TND with two sequences of T1 query and T2 key tokens in all (the
    other sizes those of tests/ascend/test_ascendc_op_host.py), optional inputs omitted where the
    op allows (sinks; cmp_residual_k but lightning_indexer's and the two sparse KL losses'). The defaults
    give every kernel more work units than any SoC has cores, so the block dim is the SoC's core count."""
    bf, i32, f32 = "bfloat16", "int32", "float32"
    lens: list[Input] = [([2], i32), ([2], i32)]
    q, k, idx = ([t1, 4, 32], bf), ([t2, 2, 32], bf), ([t1, 2, 3], i32)
    qr, kr = ([t1, 4, 16], bf), ([t2, 2, 16], bf)
    qi, ki, w = ([t1, 2, 16], bf), ([t2, 1, 16], bf), ([t1, 2], bf)
    k1, kr1, idx1 = ([t2, 1, 32], bf), ([t2, 1, 16], bf), ([t1, 1, 3], i32)
    stats, stats1, index_stats = ([2, t1, 2], f32), ([1, t1, 4], f32), ([1, t1], f32)
    mq, mlens = ([t1, 4, 512], bf), [([3], i32)] * 3
    sfa = {"layout": "TND", "scale_value": 0.125, "sparse_block_size": 2, "sparse_mode": 0}
    return {
        "rope": ([([t1, 256], bf)] * 2 + [([t2, 128], bf)] * 2 + [([2], i32)], {}),
        "rope_grad": ([([t1, 384], bf)] * 2 + [([t2, 128], bf)] * 2 + [([2], i32)], {"mode": "vjp"}),
        "cla_gate_merge": ([([t1, 3, 128], bf)] * 2 + [([t1, 3], bf)] * 2, {}),
        "cla_gate_backward": ([([t1, 3, 128], bf)] * 3 + [([t1, 3], bf)] * 2, {}),
        "sparse_flash_attention": ([q, k, k, idx, qr, kr, *lens, None], sfa),
        "sparse_flash_attention_grad": ([q, k, k, idx, q, q, stats, stats, *lens, qr, kr, None], sfa),
        "sparse_lightning_indexer_grad_kl_loss": ([q, k1, qi, ki, w, idx1, stats1, stats1, qr, kr1, *lens, None,
                                                   ([2], i32)], {"layout": "TND", "scale_value": 0.25,
                                                                 "sparse_mode": 3, "cmp_ratio": 4}),
        # compressed keys (docs/contract.md section 9.1): the indexer with cmp_residual_k given, its grad without
        "lightning_indexer": ([qi, ki, w, *lens, ([2], i32)],
                              {"layout": "TND", "sparse_count": 6, "sparse_mode": 3, "cmp_ratio": 4}),
        "lightning_indexer_grad": ([qi, ki, w, idx1, ([t1, 1, 3], f32), *lens, None],
                                   {"layout": "TND", "sparse_mode": 3, "cmp_ratio": 128}),
        "sparse_lightning_indexer_kl_loss_grad": ([qi, ki, w, idx1, ([t1, 1, 3], f32), *lens, ([2], i32)],
                                                  {"layout": "TND", "sparse_mode": 3, "cmp_ratio": 4}),
        "dense_lightning_indexer_softmax_lse": ([qi, ki, w, *lens, None], {"layout": "TND"}),
        "dense_lightning_indexer_grad_kl_loss": ([q, k1, qi, ki, w, stats1, stats1, index_stats, index_stats, qr,
                                                  kr1, *lens, None], {"layout": "TND", "scale_value": 0.25}),
        # DeepSeek-V4's CSA at its head size (D 512, one KV head), K 512 slots, CANN's cumulative lengths (B + 1)
        "sparse_flash_mla": ([([t1, 4, 512], bf), ([t2, 1, 512], bf), ([t2 // 4, 1, 512], bf), None,
                              ([t1, 1, 512], i32), *[([3], i32)] * 3, None, None, None, ([2], i32), ([4], f32)],
                             {"layout": "TND", "cmp_ratio": 4, "softmax_scale": 0.0625}),
        # CSA at the Ascend limits (D 512, N2 1, K 512), two sequences (cumulative lengths with the leading 0)
        "sparse_flash_mla_grad": ([mq, mq, mq, ([1, t1, 4], f32), ([t2, 1, 512], bf), ([t2 // 4, 1, 512], bf), None,
                                   ([t1, 1, 512], i32), *mlens, None, None, None, ([2], i32), ([4], f32)],
                                  {"layout": "TND", "softmax_scale": 0.05, "cmp_ratio": 4}),
    }


def case_stdin(spec: object, step: str, inputs: list[Input], attrs: dict[str, object]) -> str:
    """The drivers' stdin for one case (tests/ascend/cann_stub/op_host_driver.cpp documents it): the
    table's defaults (0.5 for a required attribute) under ``attrs``."""
    words = [spec.op_type, step, str(len(spec.attrs))]
    for i, a in enumerate(spec.attrs):
        value = attrs.get(a.name, 0.5 if a.required else a.default)
        words += [str(i), ATTR_KINDS[a.type], str(int(value)) if a.type == "bool" else str(value)]
    words.append(str(len(inputs)))
    for x in inputs:
        shape, dtype = x if x is not None else ([0], "float16")
        if step == "dtype" and x is not None:
            shape = [-2]  # InferDataType gets no shapes
        words += ["0" if x is None else "1", str(GE_CODES[dtype]), str(len(shape)), *map(str, shape)]
    return " ".join(words)


def run_driver(driver: Path, stdin: str, soc: str) -> tuple[int, str, str]:
    proc = subprocess.run([str(driver)], input=stdin, capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "MGO_SOC": soc})
    return proc.returncode, proc.stdout.strip(), proc.stderr.strip()


def check_op(driver: Path, op: str, soc: str, specs: ModuleType) -> str:
    """``OK block_dim=.. tiling_key=.. workspace=..`` or ``FAIL <step>: <why>`` for one op on one SoC."""
    spec = specs.OP_SPECS[op]
    code, out, err = run_driver(driver, f"{spec.op_type} registered", soc)
    if code != 0 or out != "ok 1 1 1 1":
        return f"FAIL registration: {out or err} (InferShape InferDataType Tiling TilingParse)"
    inputs, attrs = op_cases()[op]
    for step in ("shape", "dtype", "tiling"):
        code, out, err = run_driver(driver, case_stdin(spec, step, inputs, attrs), soc)
        if code != 0 or not out.startswith("ok "):
            why = (err.splitlines() or [out or f"exit {code}"])[-1]
            return f"FAIL {step}: {why}"
    fields = dict(w.split("=", 1) for w in out.split()[1:] if "=" in w)
    return " ".join(["OK", *(f"{k}={fields[k]}" for k in ("block_dim", "tiling_key", "workspace"))])


# ---------------------------------------------------------------- main
def _parse(argv: list[str] | None) -> argparse.Namespace:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0] + "\n\n" + doc.split("\n\n", 2)[2],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, (flag, env, _) in SOURCES.items():
        parser.add_argument(flag, default=None, help=f"the {name} checkout (default: ${env})")
    parser.add_argument("--build-dir", type=Path, default=None,
                        help="where the objects and the driver go (default: $MGO_HOST_CHECK_DIR or "
                             "~/.cache/ms_grad_ops/host_check)")
    parser.add_argument("--socs", nargs="+", default=list(SOCS), help=f"SoC_versions to tile for (default: {SOCS})")
    parser.add_argument("--jobs", type=int, default=2, choices=(1, 2), help="parallel g++ processes (at most 2)")
    parser.add_argument("--cxx", default=os.environ.get("CXX", "g++"), help="the compiler (default: $CXX or g++)")
    return parser.parse_args(argv)


def default_build_dir() -> Path:
    given = os.environ.get("MGO_HOST_CHECK_DIR")
    return Path(given) if given else Path.home() / ".cache" / "ms_grad_ops" / "host_check"


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    start = time.monotonic()
    try:
        sources = resolve_sources(args)
        check_tools(args.cxx)
    except SetupError as e:
        print(f"check_ascend_host: {e}", file=sys.stderr)
        return 2
    for name, path in sources.by_name().items():
        print(f"# {name} {commit(path)} {path}", flush=True)
    failed = 0
    todo = [(src, e) for src in op_host_sources() for e in EXPANSIONS]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = pool.map(lambda b: run(syntax_command(b[0], b[1], sources, args.cxx)), todo)
        for (src, expansion), (ok, log) in zip(todo, results):
            failed += not ok
            print(f"{src.stem} {expansion} {'OK' if ok else 'FAIL ' + first_error(log)}", flush=True)
    try:
        driver = build_driver(sources, args.build_dir or default_build_dir(), args.jobs, args.cxx)
    except RuntimeError as e:
        print(f"driver FAIL {e}", flush=True)
        return 1
    specs = load_specs()
    ops = sorted(name for name, spec in specs.OP_SPECS.items() if spec.ascend_dtypes)
    for soc in args.socs:
        if not any((sources.runtime / d / f"{soc}.ini").is_file() for d in INI_DIRS):
            print(f"{soc} SKIP no {soc}.ini in {sources.runtime}", flush=True)
            continue
        for op in ops:
            line = check_op(driver, op, soc, specs)
            failed += not line.startswith("OK")
            print(f"{op} {soc} {line}", flush=True)
    print(f"# {time.monotonic() - start:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
