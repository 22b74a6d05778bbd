"""Tools registered by import string in test metadata overrides (not pyiqa metrics)."""

from __future__ import annotations

from typing import Any

import torch

BUILT: list[str] = []


def mean_brightness(device: str) -> Any:
    """A deterministic toy NR tool: the mean pixel value, in [0, 1]."""
    BUILT.append(device)
    return lambda image: image.mean()


def always_nan(device: str) -> Any:
    return lambda image: torch.tensor(float("nan"))


def slow_mean(device: str) -> Any:
    """Mean brightness after a pause: long enough to kill a worker in the middle of it."""
    import os
    import time

    pause = float(os.environ.get("AGENTIC_IQA_TEST_SLOW_SECONDS", "4"))

    def run(image: Any) -> Any:
        time.sleep(pause)
        return image.mean()

    return run
