"""Generate the glue every layer shares from the op table (``ms_grad_ops/_specs.py``).

    python scripts/gen_glue.py           # rewrite the generated files
    python scripts/gen_glue.py --check   # exit 1 listing the files that are out of date

Each generator module ``scripts/glue/<name>.py`` (every module there but ``common``) has ``generate(specs)`` returning
{repository-relative path: text}: a whole generated file, or (``glue/docs.py``) a hand-written docs
page with its generated blocks rewritten. The generated files are committed, so building the package
needs neither this script nor its imports; ``tests/repository/test_generated_glue.py`` fails when one
is stale.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from glue.common import load_specs  # noqa: E402 - after the path insert

GENERATORS = tuple(sorted(p.stem for p in (Path(__file__).resolve().parent / "glue").glob("*.py")
                          if p.stem not in ("__init__", "common")))


def generated_files() -> dict[str, str]:
    """Every generated file's text by repository-relative path."""
    specs = load_specs(ROOT)
    files: dict[str, str] = {}
    for name in GENERATORS:
        for path, text in importlib.import_module(f"glue.{name}").generate(specs).items():
            if path in files:
                raise RuntimeError(f"{path} is generated twice (glue.{name})")
            files[path] = text
    return files


def stale_files() -> list[str]:
    """The generated files whose committed text differs from what the table gives."""
    return [path for path, text in generated_files().items()
            if not (ROOT / path).is_file() or (ROOT / path).read_text() != text]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report out-of-date files")
    args = parser.parse_args()
    if args.check:
        stale = stale_files()
        for path in stale:
            print(f"out of date: {path} (run python scripts/gen_glue.py)")
        return 1 if stale else 0
    for path, text in generated_files().items():
        target = ROOT / path
        if not target.is_file() or target.read_text() != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
