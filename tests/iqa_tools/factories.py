"""Tools registered by import string in test metadata overrides (not pyiqa metrics)."""

from __future__ import annotations

from typing import Any

import torch

BUILT: list[str] = []


def mean_brightness(device: str) -> Any:
    """A deterministic toy NR tool: the mean pixel value, in [0, 1]."""
    BUILT.append(device)
    return lambda image: image.mean()


#: (input dtype, model parameter dtype) for each call of a ``dtype_recorder`` tool.
SEEN_DTYPES: list[tuple[str, str]] = []


class DtypeRecorder(torch.nn.Module):
    """The mean pixel value times a parameter of 1, noting the dtypes it computed in."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()), requires_grad=False)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        SEEN_DTYPES.append((str(image.dtype), str(self.scale.dtype)))
        return image.mean() * self.scale


def dtype_recorder(device: str) -> Any:
    """A toy NR tool that is a torch module, so the registry may cast it."""
    return DtypeRecorder().to(device)


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


def batch_recorder(device: str) -> Any:
    """Mean brightness per image of a batch, appending each call's batch size to the file named
    by ``AGENTIC_IQA_TEST_BATCH_LOG`` (read by tests from outside a worker process)."""
    import os

    def run(image: Any) -> Any:
        log = os.environ.get("AGENTIC_IQA_TEST_BATCH_LOG")
        if log:
            with open(log, "a", encoding="utf-8") as handle:
                handle.write(f"{image.shape[0]}\n")
        return image.mean(dim=(1, 2, 3))

    return run
