"""The suite's own watchdog (tests/conftest.py): a test that hangs ends the run, with stacks.

CI once spent its whole limit on one test whose teardown deadlocked inside torch with the GIL
held. The watchdog must end such a run: this test hangs a pytest run the same way (a C call
that keeps the GIL) and checks that it ends, at once, naming where it hung.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_a_test_stuck_in_c_with_the_gil_held_ends_the_run_with_every_threads_stack(tmp_path):
    (tmp_path / "test_stuck.py").write_text(textwrap.dedent("""
        import ctypes

        def test_stuck_holding_the_gil():
            ctypes.PyDLL(None).sleep(120)   # a C call made without releasing the GIL
    """))
    started = time.monotonic()
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest", "--rootdir",
         str(tmp_path), str(tmp_path / "test_stuck.py")],
        capture_output=True, text=True, timeout=100, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
             "DEVSHIM_TEST_HUNG_SECONDS": "3"},
    )
    assert completed.returncode == 1
    assert time.monotonic() - started < 60
    assert "Timeout (0:00:03)!" in completed.stderr
    assert 'test_stuck.py", line 5 in test_stuck_holding_the_gil' in completed.stderr

