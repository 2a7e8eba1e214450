"""The DSA demo and its data-parallel run, smoke-tested at tiny sizes in child processes.

Data parallel: 2 workers started by ``msrun`` on 127.0.0.1 (a free port) train a few steps; their
parameters must be bitwise identical, and equal (<= 1e-6) to one process trained on the combined
batch. Every child runs in its own process group, is killed with it on timeout or failure, and
the teardown checks that none is left.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
TINY = ["--seq-len", "16", "--topk", "4", "--dim", "16", "--noise", "8", "--queries", "2"]
TIMEOUT = 240


def _env() -> dict[str, str]:
    env = dict(os.environ)       # not the OMP_NUM_THREADS=1 that `import mindspore` sets in C
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"   # msrun runs `python`
    env["MS_WORKER_IP"] = "127.0.0.1"
    env.pop("MS_ROLE", None)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen]]:
    """Popen objects started by the test; their process groups are killed at teardown, and no
    descendant of this test process may survive it."""
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    left = [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"processes left behind: {[(p.pid, p.cmdline()) for p in left]}"


def _run(children: list[subprocess.Popen], cmd: list[str], cwd: Path) -> str:
    proc = subprocess.Popen(cmd, cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    children.append(proc)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{cmd[1:3]} timed out after {TIMEOUT} s:\n{out[-3000:]}")
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{out[-3000:]}"
    return out


def test_demo_runs_both_stages(tmp_path: Path, children: list[subprocess.Popen]) -> None:
    out = _run(children, [sys.executable, str(SCRIPTS / "dsa_demo.py"), *TINY, "--batch", "4", "--warmup-steps", "3",
                          "--sparse-steps", "2", "--log-every", "1"], tmp_path)
    for line in ("[dense warm-up] step    3", "[sparse] step    2", "[dense] step    2", "final accuracy"):
        assert line in out, out[-3000:]


def test_data_parallel_matches_one_process(tmp_path: Path, children: list[subprocess.Popen]) -> None:
    args = [*TINY, "--batch", "4", "--steps", "3", "--log-every", "1"]
    msrun = str(Path(sys.executable).parent / "msrun")
    dp = _run(children, [msrun, "--worker_num=2", "--local_worker_num=2", "--master_addr=127.0.0.1",
                         f"--master_port={_free_port()}", "--join=True", f"--log_dir={tmp_path / 'logs'}",
                         str(SCRIPTS / "dsa_data_parallel.py"), *args, "--save", str(tmp_path / "dp")], tmp_path)
    _run(children, [sys.executable, str(SCRIPTS / "dsa_data_parallel.py"), *args, "--save", str(tmp_path / "one")],
         tmp_path)
    ranks = [np.load(tmp_path / f"dp{r}.npz") for r in range(2)]
    one = np.load(tmp_path / "one0.npz")
    assert sorted(ranks[0].files) == sorted(one.files) and len(one.files) > 10, dp[-2000:]
    for name in one.files:
        assert np.array_equal(ranks[0][name], ranks[1][name]), f"{name}: ranks differ"
        err = np.linalg.norm(ranks[0][name] - one[name]) / np.linalg.norm(one[name])
        assert err <= 1e-6, f"{name}: data parallel vs one process, relative L2 {err:.3g}"
    start = np.load(tmp_path / "dp0.init.npz")
    assert all(not np.array_equal(start[n], one[n]) for n in one.files), "some parameter did not train"
