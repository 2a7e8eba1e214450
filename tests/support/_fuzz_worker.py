"""The fuzz worker: a long-lived process that runs fuzz cases (tests/support/_fuzz_cases.py) one JSON line
at a time from stdin and answers one line per case on stdout (prefixed, so MindSpore's own output
cannot be mistaken for an answer). Importing MindSpore costs seconds, so one worker runs many
cases; the test side restarts it after a crash or a hang, which then counts as a failed case."""
from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

PREFIX = "@@fuzz@@ "


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import mindspore as ms
    ms.set_device("CPU")
    import _fuzz_cases
    out = sys.stdout
    out.write(PREFIX + json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        case = json.loads(line)
        try:
            ok, detail = _fuzz_cases.run(case)
        except Exception:  # noqa: BLE001 - reported to the test, which fails the case
            ok, detail = False, "worker exception: " + traceback.format_exc()[-1500:]
        out.write(PREFIX + json.dumps({"ok": ok, "detail": detail}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
