"""mindformers 2.0.0 for the integration tests, installed once into a folder beside the venv, and
the runner of the examples that use it.

``pip install --no-deps --target``: mindformers' ``hyper-parallel`` requirement is not on PyPI,
and the rest of its requirements are not needed by its training graphs; the few packages its
modules import are pinned. The examples run in subprocesses with the folder on PYTHONPATH, so
the test process never imports mindformers. First run: about 45 s for the install.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# mindformers 2.0.0 (the release paired with MindSpore 2.10) and what its modules import on the
# way to its training graphs, at versions that work with numpy < 2 (none of them needs numpy).
PINS = ("mindformers==2.0.0", "regex==2026.9.29", "pyyaml==6.0.3", "deprecated==1.2.18", "wrapt==1.17.3",
        "requests==2.34.2", "urllib3==2.8.0", "idna==3.20", "certifi==2026.7.22", "charset_normalizer==3.5.2")


def _target() -> Path:
    return Path(os.environ.get("MGO_MINDFORMERS_DIR", Path(sys.prefix) / "mgo-mindformers-2.0.0"))


def mindformers_folder() -> Path:
    """The folder holding mindformers 2.0.0 and its pinned imports (installed once, then reused)."""
    target = _target()
    marker = target / ".mgo-pins"
    if marker.is_file() and marker.read_text() == "\n".join(PINS):
        return target
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(staging), *PINS]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}"
    (staging / ".mgo-pins").write_text("\n".join(PINS))
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def run_example(script: Path, args: list[str], mindformers: Path, cwd: Path, timeout: int) -> str:
    """``script args`` in a subprocess with mindformers on PYTHONPATH; its output (the test fails
    on a non-zero exit or a timeout, showing the output's end)."""
    env = dict(os.environ)  # not inherited implicitly: `import mindspore` set OMP_NUM_THREADS=1 in C
    env["PYTHONPATH"] = os.pathsep.join([str(mindformers), *filter(None, [env.get("PYTHONPATH")])])
    cmd = [sys.executable, str(script), *args]
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
        pytest.fail(f"{script.name} did not finish in {timeout} s:\n{out[-4000:]}")
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{out[-6000:]}"
    return out
