"""Toy tools for the time-limit tests (tests/workers/test_cli_distributed.py), registered by
import string in a metadata override and built inside the workers.

Workers import this module: it must stay free of test imports (``tests.conftest`` clears the
``AGENTIC_IQA_*`` variables of the process that imports it, a worker's included).
"""

from __future__ import annotations

import time
from typing import Any

#: Width of the one photo on which ``dawdling`` takes its time.
SLOW_WIDTH = 100


def dawdling(device: str) -> Any:
    """Mean brightness; on a photo SLOW_WIDTH pixels wide, after a minute's sleep (which a soft
    time limit interrupts)."""

    def run(image: Any) -> Any:
        if image.shape[-1] == SLOW_WIDTH:
            time.sleep(60)
        return image.mean()

    return run


def stubborn(device: str) -> Any:
    """Mean brightness after a minute that no soft time limit cuts short, as a long native call
    (a stuck GPU kernel) would be: only the hard limit stops it."""

    def run(image: Any) -> Any:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            try:
                time.sleep(max(0.0, end - time.monotonic()))
            except BaseException:  # deaf to SoftTimeLimitExceeded
                continue
        return image.mean()

    return run
