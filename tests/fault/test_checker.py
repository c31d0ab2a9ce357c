"""``tools/chaos.py`` stays runnable: a short run of one scenario prints its table and
goals. (Whether the goals pass is the checker's own verdict, printed by the long run.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.fault, pytest.mark.timeout(120)]

CHAOS = Path(__file__).parents[2] / "tools" / "chaos.py"


def test_checker_runs_and_reports(fault_binary):
    out = subprocess.run(
        [
            sys.executable,
            str(CHAOS),
            "--quick",
            "--scenario",
            "kill",
            "--workers",
            "2",
            "--duration",
            "4",
            "--server",
            fault_binary.path,
        ],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert out.returncode in (0, 1), out.stderr[-2000:]
    text = out.stdout
    assert "lost upd. fenced" in text and "\nkill " in text, text
    assert "Goals" in text and ("PASS" in text or "FAIL" in text), text
