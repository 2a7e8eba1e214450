"""``AlltoAll``/``AlltoAllV`` over a group of one member and ``MoveTo`` on CPU
(ms_grad_ops.cpu_gaps.comm): the identity, differentiable, PyNative and GRAPH, in one process
(communication not initialised: the world is this process) and under msrun with communication
initialised and a created group of one member."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from _gaps import forward, random, upstream
from _paths import SUPPORT
from mindspore import Tensor, ops

from ms_grad_ops.cpu_gaps import comm


def exchange(x: Tensor) -> Tensor:
    y = ops.AlltoAll(split_count=1, split_dim=-1, concat_dim=-2)(x)
    flat = y.reshape(-1)
    splits = ops.MoveTo()(Tensor([flat.shape[0]], ms.int64), "CPU", True)
    return ops.AlltoAllV(block_size=1)(flat, splits, splits).reshape(x.shape)


def test_group_of_one_is_the_identity(exec_mode: str) -> None:
    assert comm.group_size(None) == 1
    rng = np.random.default_rng(0)
    x = random(rng, (3, 4), "float32")
    got = forward(exchange, Tensor(x.astype(np.float32)))
    assert np.array_equal(got.asnumpy(), x)
    dy = random(rng, (3, 4), "float32")
    (dx,), _ = upstream(exchange, [x], [], "float32", dy)
    assert np.array_equal(dx, dy)


def test_move_to(exec_mode: str) -> None:
    x = Tensor(np.array([3, 1, 2], np.int64))
    assert np.array_equal(forward(ops.move_to, x, "CPU", False).asnumpy(), [3, 1, 2])

    def from_list(t: Tensor) -> Tensor:
        return ops.MoveTo()([4, 5, 6], "CPU") + t

    got = forward(from_list, x)
    assert got.dtype == ms.int64 and np.array_equal(got.asnumpy(), [7, 6, 8])


def test_split_count_must_match_the_group() -> None:
    with pytest.raises(ValueError, match="AlltoAll: split_count must equal the group's size 1, got 2"):
        ops.AlltoAll(split_count=2, split_dim=0, concat_dim=0)


def test_initialised_group_of_one(tmp_path: Path) -> None:
    """Communication initialised (msrun, one worker) and a group of one member created, as
    mindformers' expert group under data parallelism with expert_model_parallel_size=1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # msrun runs `python`
    cmd = [str(Path(sys.executable).parent / "msrun"), "--worker_num=1", "--local_worker_num=1",
           "--master_addr=127.0.0.1", f"--master_port={port}", "--join=True", f"--log_dir={tmp_path}",
           str(SUPPORT / "_gap_comm_worker.py")]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    log = (tmp_path / "worker_0.log").read_text() if (tmp_path / "worker_0.log").is_file() else done.stdout
    lines = [line for line in log.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, log[-4000:]
    result = json.loads(lines[0].split(" ", 1)[1])
    assert result["group_size"] == 1
    assert result["out"] == np.arange(12).reshape(3, 4).tolist() and result["grad"] == np.ones((3, 4)).tolist()
