"""Build each tool's model once per process, and hand it the tensors it computes on.

A metric is created on first use, once per process (a pool shared by every registry), never at
import: a process that never runs a tool never imports torch or pyiqa, and a Celery worker never
builds models in the parent before it forks.  The time spent building is counted per thread,
so a result can say how much of its time was one-time loading.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from . import numerics
from .catalog import Precision, ToolSpec
from .images import LoadedImage


class MetricPool:
    """Keep the metrics of this process, keyed by what determines them; build each once."""

    def __init__(self) -> None:
        self._metrics: dict[tuple[Any, ...], Any] = {}
        self._locks: dict[tuple[Any, ...], threading.Lock] = {}
        self._guard = threading.Lock()
        self.creations: Counter[str] = Counter()

    def lock_for(self, key: tuple[Any, ...]) -> threading.Lock:
        """Return the lock that serialises building and running the metric of ``key``."""
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def get_or_create(self, key: tuple[Any, ...], label: str, build: Callable[[], Any]) -> Any:
        """Return the metric of ``key``, built by ``build`` the first time (counted as
        ``label``)."""
        with self.lock_for(key):
            if key not in self._metrics:
                self._metrics[key] = build()
                self.creations[label] += 1
            return self._metrics[key]


metric_pool = MetricPool()
#: Seconds this thread has spent building models (``ToolResult.load_time`` is the difference).
_LOADS = threading.local()


def load_seconds() -> float:
    """Return the seconds this thread has spent building models so far."""
    return getattr(_LOADS, "seconds", 0.0)


def count_load(seconds: float) -> None:
    """Add ``seconds`` of model building to this thread's count."""
    _LOADS.seconds = load_seconds() + seconds


_AUTO_DEVICE: list[str] = []


def auto_device() -> str:
    """Return cuda when torch sees a GPU, else cpu; asked once per process, since the first question
    loads torch and the CUDA runtime (seconds, counted as one-time load time)."""
    if not _AUTO_DEVICE:
        started = time.perf_counter()
        import torch

        _AUTO_DEVICE.append("cuda" if torch.cuda.is_available() else "cpu")
        count_load(time.perf_counter() - started)
    return _AUTO_DEVICE[0]


def metric_creations() -> Counter[str]:
    """Count how many times each tool's model was built in this process (for tests and
    diagnostics)."""
    return Counter(metric_pool.creations)


def numerics_for(spec: ToolSpec) -> AbstractContextManager[None]:
    """Return the numerics a tool computes under: float64 tools normalise separably
    (:mod:`iqa_tools.numerics`); others as pyiqa does."""
    return numerics.separable_normalisation() if spec.precision == "float64" else nullcontext()


#: Bytes of uint8 pixels converted to the input tensor at a time (:func:`to_tensor`).
_BAND_BYTES = 8 << 20


def to_tensor(image: LoadedImage | None, device: str, precision: Precision) -> Any:
    """Return the image as 1 x 3 x H x W on ``device`` in ``precision``, the metric's dtype.

    pyiqa never casts its input, and its hand-crafted metrics move their constants to the input's
    dtype, so a float64 tensor is all BRISQUE, NIQE and PIQE need to compute in float64.

    Filled a band of rows at a time from :attr:`LoadedImage.stored` with the values of
    :attr:`LoadedImage.pixels` (float32 / 255), which is never computed or kept here: the
    tensor is the only full-size float copy, and it goes with the call, so the tools of one
    step do not each leave a float copy of the image behind.
    """
    import torch

    from .images import to_float

    if image is None:
        return None
    stored = image.stored
    height, width = stored.shape[:2]
    tensor = torch.empty((1, 3, height, width), dtype=getattr(torch, precision), device=device)
    rows = max(1, _BAND_BYTES // max(1, width * 3))
    for top in range(0, height, rows):
        band = torch.from_numpy(to_float(stored[top : top + rows]))
        tensor[0, :, top : top + rows].copy_(band.permute(2, 0, 1))
    return tensor


def cast_model(metric: Any, precision: Precision) -> Any:
    """Cast a torch module's floating parameters and buffers to ``precision``; others as-is.

    Only float64 tools are cast: a float32 model stays exactly as pyiqa built it.
    """
    import torch

    if precision == "float32" or not isinstance(metric, torch.nn.Module):
        return metric
    return metric.to(dtype=getattr(torch, precision))
