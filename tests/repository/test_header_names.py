"""Every C++ header name in the tree is unique: readers and tools (scripts/build_ascend.sh flattens
#includes to bare file names) must be able to tell which header is meant.

Naming scheme where a family needs a header on both sides: the shape-rule side is
``infer_shape/<family>_rules.h``, the CPU kernel side ``cpu/<family>_common.h`` (with its ``.cc``).
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from _paths import ROOT as REPO

HEADER_DIRS = ("infer_shape", "cpu", "ascendc", "tests/cpu/cpp", "tests/ascend/ascendc_harness",
               "tests/ascend/cann_stub")
HEADER_SUFFIXES = (".h", ".hpp", ".hh")


def duplicated_header_names(root: Path, dirs: tuple[str, ...] = HEADER_DIRS) -> dict[str, list[str]]:
    """Returns {basename: [repository-relative paths]} for every header basename found more than once
    under ``root/<dir>`` (recursively) for the given directories."""
    seen: dict[str, list[str]] = defaultdict(list)
    for d in dirs:
        for path in sorted((root / d).rglob("*")):
            if path.is_file() and path.suffix in HEADER_SUFFIXES:
                seen[path.name].append(path.relative_to(root).as_posix())
    return {name: paths for name, paths in seen.items() if len(paths) > 1}


def test_header_names_are_unique() -> None:
    assert (REPO / "infer_shape" / "common.h").is_file(), "the scan must see the tree"
    assert duplicated_header_names(REPO) == {}


def test_duplicate_detector_finds_a_clash(tmp_path: Path) -> None:
    for rel in ("infer_shape/seq_lengths.h", "cpu/seq_lengths.h", "ascendc/common/x.h", "tests/cpu/cpp/y.hpp"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("#pragma once\n")
    (tmp_path / "ascendc/deep/er").mkdir(parents=True)
    (tmp_path / "ascendc/deep/er/y.hpp").write_text("#pragma once\n")
    assert duplicated_header_names(tmp_path) == {
        "seq_lengths.h": ["infer_shape/seq_lengths.h", "cpu/seq_lengths.h"],
        "y.hpp": ["ascendc/deep/er/y.hpp", "tests/cpu/cpp/y.hpp"],
    }
