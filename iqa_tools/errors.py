"""Errors raised by the tool layer.

Every failure a caller can meet is a :class:`ToolError`, so one ``except ToolError`` keeps a bad
image or a broken model from crashing an agent run or a dataset job.  Subclasses say *what kind*
of failure it was, because that decides whether a fallback tool can help: a broken input image
cannot be rescued by another metric, a missing weight file can.
"""

from __future__ import annotations


class ToolError(Exception):
    """Base class: anything that stops a tool from producing a score."""


class MetadataError(ToolError):
    """``tools.json`` (or an override file) is malformed; the message names the bad entry."""


class UnknownToolError(ToolError):
    """The name matches no tool in the metadata."""


class ImageLoadError(ToolError):
    """An input image is missing, unreadable or not an image; the message names the path."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"cannot load image {path!r}: {reason}")
        self.path = path
        self.reason = reason


class InputError(ToolError):
    """The inputs do not suit the tool (FR tool without reference, size mismatch)."""


class StoreUnavailable(ToolError):
    """The tool-score cache's store (Redis, a SQLite file) does not answer: infrastructure, not
    the tool; the message names the store (credentials masked) and what to set."""


class ImageTooLargeError(InputError):
    """The image has more pixels than one tool call may take (:func:`.images.pixel_budget`):
    memory grows with pixels (BRISQUE on a 169-megapixel photo reached 18 GB), so such a file
    is refused with its size before it is decoded, never half-processed."""

    def __init__(self, path: str, size: tuple[int, int], budget: int) -> None:
        width, height = size
        super().__init__(
            f"image {path!r} is {width}x{height} pixels ({width * height / 1e6:.1f} MP), above "
            f"the budget of {budget / 1e6:.1f} MP per tool call, which bounds memory: downscale "
            "it first, or raise AGENTIC_IQA_MAX_PIXELS where there is memory for it")
        self.path = path
        self.size = size
        self.budget = budget


class ImageTooSmallError(InputError):
    """The image is smaller than a tool can measure; says the size found and the one needed.

    Kept apart from :class:`ImageLoadError` because the file is fine: a bigger image would do.
    """

    def __init__(self, path: str, size: tuple[int, int], minimum: int,
                 tool: str | None = None) -> None:
        width, height = size
        who = f"{tool} needs" if tool else "the IQA tools need"
        super().__init__(f"image {path!r} is {width}x{height} pixels; {who} at least "
                         f"{minimum}x{minimum}")
        self.path = path
        self.size = size
        self.minimum = minimum
        self.tool = tool


class ToolFailure(ToolError):
    """The tool itself could not produce a usable score; a fallback tool may still help."""


class ToolUnavailableError(ToolFailure):
    """The tool cannot run on this machine (missing weights, no network to fetch them)."""


class NonFiniteScoreError(ToolFailure):
    """The tool ran but returned NaN or infinity."""


class ToolRuntimeError(ToolFailure):
    """The metric raised while being created or run."""
