"""One-off generator of the compiler-intrinsic stand-ins in ``stubs/stub_fun.h`` and ``stubs/stub_enums.h``.

How it was run (asc-devkit at commit 82b89a15f26329511fc7fbc807d5132a1f9b4ba7, g++ 12.2; three rounds,
and the same output again from the committed headers):

    python ascendc/api_check/gen_stubs.py --asc-devkit /work/asc-devkit --fresh

In CANN's CPU-debug configuration the open Ascend C headers call compiler intrinsics (``set_flag``,
``copy_gm_to_ubuf``, ``vadd``, the register-level ``vlds``/``plt_b32``, ...) and CPU-debug library
functions (``AscendCBufInit``, ``GmAlloc``, ...), and name enum types (``QuantMode_t``, ``::Dist``, ...)
that CANN declares in closed headers. This script learns which from g++ itself: it compiles every
build of ``scripts/check_ascend_api.py``, reads the errors

    'NAME' was not declared (NAME called on that line) / no arguments to 'NAME' that depend on ...
        -> a function ``template <typename... Args> R NAME(Args...);``, R = StubResult (converts to
           what the caller assigns it to; stub_def.h), a scalar type from RESULT_TYPES below, or void
           once g++ says ``return NAME(...)`` returns a value from a void function
    '::T' has not been declared          -> an enum class T (named in std::integral_constant<::T, ...>)
    'X' is not a member of 'T' (T an enum here), or X in BARE_ENUMERATORS -> an enumerator of T

rewrites both headers and compiles again until nothing new turns up. The functions take any
arguments: they declare that the open headers' calls exist, not what the hardware accepts (the open
headers' own code and our kernels' calls into the public API are what the check is about). What it
cannot classify (types, variables, missing headers) is printed and written by hand in
``stub_def.h``, ``kernel_fp16.h``, ``kernel_bf16.h``, ``simt_stub.h``, ``kernel_simt_cpu.h``.
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import check_ascend_api as api  # noqa: E402 - after the path insert

STUBS = HERE / "stubs"
# Enum types of the closed headers the open ones name (``T::X``, casts, parameters), with their underlying types.
ENUM_TYPES = {"mem_dsb_t": "uint8_t", "mem_t": "uint8_t", "QuantMode_t": "uint8_t", "pad_t": "uint8_t",
              "addr_cal_mode_t": "uint8_t", "atomic_type_t": "uint8_t", "atomic_op_t": "uint8_t",
              "ub_addr8_t": "uint8_t", "vpart_t": "uint8_t", "cache_line_t": "uint8_t", "dcci_dst_t": "uint8_t",
              "Order_t": "uint8_t", "Spr": "uint8_t", "Pat": "uint8_t", "KernelMode": "uint8_t",
              "ROUND": "uint8_t", "QuantMode_post": "uint8_t", "Literal": "uint8_t"}
# Enumerators the open headers name bare, by their enum type.
BARE_ENUMERATORS = {"inc": "addr_cal_mode_t", "dec": "addr_cal_mode_t", "L128": "vpart_t", "H128": "vpart_t",
                    **{f"VA{i}": "ub_addr8_t" for i in range(8)},
                    # Operands of the register-level (VF) instructions; their type is never spelled.
                    **dict.fromkeys(("MODE_ZEROING", "MODE_MERGING", "POST_UPDATE", "LOWER", "HIGHER", "PART_EVEN",
                                     "PART_ODD", "PAT_ALL", "PAT_ALLF", "ROUND_R", "ROUND_Z", "RS_DISABLE", "LD_VST",
                                     "ST_VLD", "ST_VST", "SV_ALL", "VLD_ST", "VLD_VST", "VST_LD", "VST_ST", "VST_VLD",
                                     "VST_VST", "VS_ALL", "VV_ALL"), "Literal")}
# The result types of intrinsics whose value the open headers use.
RESULT_TYPES = {
    **dict.fromkeys(("bcnt0", "bcnt1", "clz", "sff0", "sff1", "sflbits", "get_acc_val", "get_arch_ver",
                     "get_block_idx", "get_block_num", "get_icache_prl_st", "get_max_min_cnt", "get_pc",
                     "get_rsvd_cnt", "get_subblockdim", "get_subblockid", "get_vms4_sr"), "int64_t"),
    **dict.fromkeys(("get_ctrl", "get_imm", "get_st_atomic_cfg", "sbitset0", "sbitset1"), "uint64_t"),
    **dict.fromkeys(("conv_f322s32a", "conv_f322s32c", "conv_f322s32f", "conv_f322s32r"), "int32_t"),
    "conv_f322f16o": "half",
}

_UNDECLARED = re.compile(r"^(.+?):(\d+):\d+: error: ‘(\w+)’ was not declared in this scope", re.M)
_NO_ARGS = re.compile(r"error: there are no arguments to ‘(\w+)’ that depend on a template parameter")
_GLOBAL_TYPE = re.compile(r"error: ‘::(\w+)’ has not been declared")
_NOT_MEMBER = re.compile(r"error: ‘(\w+)’ is not a member of ‘(\w+)’")
_VOID_RETURN = re.compile(r"^(.+?):(\d+):\d+: error: return-statement with a value, in function returning ‘void’",
                          re.M)
_RESULT_USE = re.compile(r"^(.+?):(\d+):\d+: error: .*StubResult", re.M)


def _read_state() -> tuple[dict[str, str], dict[str, set[str]]]:
    """The intrinsics (with their result types) and enumerators the committed headers already declare."""
    funcs: dict[str, str] = {}
    enums: dict[str, set[str]] = {t: set() for t in ENUM_TYPES}
    fun = STUBS / "stub_fun.h"
    if fun.exists():
        found = re.findall(r"^template <typename\.\.\. Args>\n(\S+) (\w+)\(Args\.\.\.\);", fun.read_text(), re.M)
        funcs = {name: result for result, name in found}
    enum_h = STUBS / "stub_enums.h"
    if enum_h.exists():
        for name, body in re.findall(r"^enum (?:class )?(\w+) : \w+ \{([^}]*)\};", enum_h.read_text(), re.M):
            enums.setdefault(name, set()).update(x.strip() for x in body.split(",") if x.strip())
    return funcs, enums


def _write(funcs: dict[str, str], enums: dict[str, set[str]]) -> None:
    head = "// GENERATED by ascendc/api_check/gen_stubs.py (see its docstring for how it was run). Do not edit.\n"
    bare = set(BARE_ENUMERATORS.values())
    enum_lines = [f"enum {'' if t in bare else 'class '}{t} : {ENUM_TYPES.get(t, 'int')} "
                  f"{{ {', '.join(sorted(enums[t]))} }};" for t in sorted(set(enums) | set(ENUM_TYPES))]
    (STUBS / "stub_enums.h").write_text(
        head + "// The closed headers' enum types, with the enumerators the open headers name.\n#pragma once\n"
        "#include <cstdint>\n\n" + "\n".join(enum_lines) + "\n")
    decls = [f"template <typename... Args>\n{funcs[f]} {f}(Args...);" for f in sorted(funcs)]
    (STUBS / "stub_fun.h").write_text(
        head + "// The compiler intrinsics and CPU-debug library functions the open headers call with\n"
        "// ASCENDC_CPU_DEBUG=1: declared only (the check compiles with -fsyntax-only), taking any arguments.\n"
        "#pragma once\n"
        '#include "stub_def.h"\n\n' + "\n".join(decls) + "\n")


def _scan(log: str, funcs: dict[str, str], enums: dict[str, set[str]], unknown: set[str]) -> bool:
    """Adds what the log asks for; returns whether anything was new."""
    new = False
    for m in _UNDECLARED.finditer(log):
        path, line, name = m.group(1), int(m.group(2)), m.group(3)
        if name in funcs:
            continue
        if name in BARE_ENUMERATORS:
            new |= name not in enums[BARE_ENUMERATORS[name]]
            enums[BARE_ENUMERATORS[name]].add(name)
        elif re.search(rf"(?<![\w:.>]){name}\s*\(", _lines(path, line, 8)) and name not in ENUM_TYPES:
            funcs[name] = RESULT_TYPES.get(name, "StubResult")
            new = True
        else:
            unknown.add(f"undeclared {name}")
    for name in _NO_ARGS.findall(log):
        if name not in funcs:
            funcs[name] = RESULT_TYPES.get(name, "StubResult")
            new = True
    for m in _VOID_RETURN.finditer(log):
        # ``return intrinsic(...);`` in a void function: that intrinsic returns void.
        text = _lines(m.group(1), int(m.group(2)))
        for f in funcs:
            if funcs[f] != "void" and re.search(rf"return\s+{f}\s*\(", text):
                funcs[f] = "void"
                new = True
    for name in _GLOBAL_TYPE.findall(log):
        # Named ``::T`` in std::integral_constant<::T, static_cast<::T>(v)>: an enum of the compiler's.
        if name not in enums:
            enums[name] = set()
            new = True
    for member, owner in _NOT_MEMBER.findall(log):
        if owner in enums and member not in enums[owner]:
            enums[owner].add(member)
            new = True
    for m in _RESULT_USE.finditer(log):
        text = _lines(m.group(1), int(m.group(2)))
        for f in funcs:
            if re.search(rf"\b{f}\s*\(", text) and funcs[f] == "StubResult":
                unknown.add(f"result of {f} used")
    for m in re.finditer(r"fatal error: (\S+): No such file or directory", log):
        unknown.add(f"missing header {m.group(1)}")
    return new


def _lines(path: str, number: int, before: int = 0) -> str:
    """Line ``number`` of a file and the ``before`` lines above it (g++ places some errors in a call spanning
    several lines on its last line)."""
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[max(number - 1 - before, 0):number])
    except OSError:
        return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--asc-devkit", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--fresh", action="store_true", help="start from empty headers, not the committed ones")
    parser.add_argument("--only", default="", help="only the builds whose 'kernel arch kind' contains this")
    args = parser.parse_args(argv)
    devkit = args.asc_devkit.resolve()
    api.check_devkit(devkit)
    funcs, enums = ({}, {t: set() for t in ENUM_TYPES}) if args.fresh else _read_state()
    with tempfile.TemporaryDirectory(prefix="mgo-gen-stubs-") as tmp:
        includes = api.include_flags(devkit, api.stage(devkit, Path(tmp)))
        todo = [b for b in api.builds() if args.only in f"{b.name} {b.arch} {b.kind}"]
        for round_no in range(1, args.rounds + 1):
            _write(funcs, enums)
            unknown: set[str] = set()
            with ThreadPoolExecutor(max_workers=2) as pool:
                logs = list(pool.map(lambda b: api.run_build(b, includes)[1], todo))
            new = [_scan(log, funcs, enums, unknown) for log in logs]
            print(f"round {round_no}: {len(funcs)} intrinsics, {sum(map(len, enums.values()))} enumerators")
            if not any(new):
                break
        _write(funcs, enums)
    for item in sorted(unknown):
        print(f"not generated: {item}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
