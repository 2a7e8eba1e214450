"""examples/skip_bad_batch.py (docs/troubleshooting.md), run in a child process: in GRAPH mode the
loop rejects its two bad batches with ``ms_grad_ops.preflight`` (the kernels' messages) and trains on;
without the check the first bad batch's step fails and every later step is refused (MindSpore's
behaviour after a kernel-time error in a compiled network, which the troubleshooting page states)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _paths import EXAMPLES

STEPS = 8


def _run(tmp_path: Path, *extra: str) -> list[str]:
    run = subprocess.run([sys.executable, str(EXAMPLES / "skip_bad_batch.py"), "--steps", str(STEPS), *extra],
                         cwd=tmp_path, env=dict(os.environ), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return [ln for ln in run.stdout.splitlines() if ln.startswith(("step ", "trained "))]


def test_the_loop_skips_bad_batches_and_trains_on(tmp_path: Path) -> None:
    lines = _run(tmp_path)
    assert lines[3] == ("step 3: batch skipped: sparse_flash_attention: sparse_indices value 7 at row 1, group 0, "
                        "slot 0 is out of range [-1, 4) (batch 0 has 4 keys, sparse_block_size 1)"), lines
    assert lines[6].startswith("step 6: batch skipped: sparse_flash_attention: the last entry of "
                               "actual_seq_lengths_query"), lines
    for i in (0, 1, 2, 4, 5, 7):
        assert lines[i].startswith(f"step {i}: loss "), lines
    assert lines[-1] == "trained 6 steps, skipped 2 bad batches, 0 steps failed"


def test_without_the_check_the_graph_refuses_every_later_step(tmp_path: Path) -> None:
    lines = _run(tmp_path, "--no-preflight")
    assert lines[3].startswith("step 3: step failed: sparse_flash_attention: sparse_indices value 7"), lines
    for i in range(4, STEPS):
        assert lines[i] == (f"step {i}: step failed: An error occurred in the previous step of this model execution, "
                            "and the current step cannot be executed."), lines
    assert lines[-1] == f"trained 3 steps, skipped 0 bad batches, {STEPS - 3} steps failed"
