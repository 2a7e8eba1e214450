"""sparse_flash_mla(_grad) give the same bits for 1, 2 and 3 OpenMP threads (docs/contract.md sections 0.10, 8):
d_ori_kv, d_cmp_kv and d_sinks sum fixed row partitions in a fixed order, whatever thread runs them."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _paths import SUPPORT

_SCRIPT = """
import hashlib, sys
sys.path.insert(0, sys.argv[1])
import mindspore as ms
import numpy as np
from _smla_cases import make_case
from ms_grad_ops import ops

for dtype, kind in (("bfloat16", "csa"), ("float32", "hca")):
    c = make_case(np.random.default_rng(9), layout="TND", lens=[(40, 40), (23, 31)], kind=kind, n1=8, d=32, k=12,
                  ratio=2, win_left=9)
    msd = {"bfloat16": ms.bfloat16, "float32": ms.float32}[dtype]
    f = lambda x: None if x is None else ms.Tensor(np.asarray(x, np.float32), msd)
    ints = {n: None if v is None else ms.Tensor(v) for n, v in c.ints.items()}
    sinks = ms.Tensor(c.arrays["sinks"])
    out, lse = ops.sparse_flash_mla(f(c.arrays["query"]), f(c.arrays["ori_kv"]), f(c.arrays["cmp_kv"]), **ints,
                                    sinks=sinks, **c.attrs)
    do = f(np.random.default_rng(1).standard_normal(out.shape))
    g = ops.sparse_flash_mla_grad(f(c.arrays["query"]), do, out, lse, f(c.arrays["ori_kv"]), f(c.arrays["cmp_kv"]),
                                  **ints, sinks=sinks, **c.attrs)
    h = hashlib.sha256()
    for x in (out, lse, *(y for y in g if y is not None)):
        h.update(x.float().asnumpy().tobytes())
    print(dtype, kind, h.hexdigest())
"""


def test_bitwise_for_1_2_and_3_threads(tmp_path: Path) -> None:
    script = tmp_path / "det.py"
    script.write_text(_SCRIPT)
    digests = []
    for threads in ("1", "2", "3"):
        res = subprocess.run([sys.executable, str(script), str(SUPPORT)], env=dict(os.environ, OMP_NUM_THREADS=threads),
                             cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        digests.append([line for line in res.stdout.splitlines() if line.startswith(("bfloat16", "float32"))])
    assert len(digests[0]) == 2 and digests[0] == digests[1] == digests[2]
