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
    """The image has more pixels than the explicit cap (``AGENTIC_IQA_MAX_PIXELS``,
    :func:`.images.pixel_cap`): refused with its size from the header, before it is decoded,
    never half-processed.  :class:`ToolMemoryError`, the byte budget per tool call, is one."""

    def __init__(self, path: str, size: tuple[int, int], budget: int) -> None:
        width, height = size
        super().__init__(
            f"image {path!r} is {width}x{height} pixels ({width * height / 1e6:.1f} MP), above "
            f"the budget of {budget / 1e6:.1f} MP per tool call, which bounds memory: downscale "
            "it first, or raise AGENTIC_IQA_MAX_PIXELS where there is memory for it"
        )
        self.path = path
        self.size = size
        self.budget = budget


class ToolMemoryError(ImageTooLargeError):
    """One tool call on this image would need more memory than the budget per call
    (``AGENTIC_IQA_TOOL_MEMORY``, :mod:`.memory`): estimated from the file's header and
    refused before any decode or model work, with the tool, the size, the estimate, the budget
    and the setting to raise."""

    def __init__(
        self, path: str, size: tuple[int, int], tool: str, estimate: int, budget: int
    ) -> None:
        from .memory import format_bytes

        width, height = size
        InputError.__init__(
            self,
            f"{tool} on image {path!r} ({width}x{height} pixels, {width * height / 1e6:.1f} MP) "
            f"needs about {format_bytes(estimate)}, above the memory budget of "
            f"{format_bytes(budget)} per tool call: raise AGENTIC_IQA_TOOL_MEMORY (tool_memory "
            "in configs/tools.yaml) where there is memory for it, or downscale the image",
        )
        self.path = path
        self.size = size
        self.budget = budget
        self.tool = tool
        self.estimate = estimate


class ImageTooSmallError(InputError):
    """The image is smaller than a tool can measure; says the size found and the one needed.

    Kept apart from :class:`ImageLoadError` because the file is fine: a bigger image would do.
    """

    def __init__(
        self, path: str, size: tuple[int, int], minimum: int, tool: str | None = None
    ) -> None:
        width, height = size
        who = f"{tool} needs" if tool else "the IQA tools need"
        super().__init__(
            f"image {path!r} is {width}x{height} pixels; {who} at least {minimum}x{minimum}"
        )
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


class StorageError(ToolError):
    """Reading an image's bytes from where they are kept (a local path or an object-store URL,
    :mod:`.storage`) failed.  Messages name the location without credentials: a URL never
    carries any (refused), a query string is shown as ``?***``, and a backend's own text is
    never quoted, only its error code.

    ``stops_job``: the same failure would meet every item (a wrong credential, a missing
    backend), so a job should stop with this one message instead of failing item by item.
    """

    stops_job = False

    def __init__(self, message: str, location: str = "") -> None:
        super().__init__(message)
        self.location = location


class PathOutsideRoot(StorageError):
    """A name from a manifest or dataset file would lead out of its root (``..``, an absolute
    path, another bucket or host, an encoded ``%2e%2e``, a NUL byte): it is never read."""

    def __init__(self, name: str, root: str, reason: str) -> None:
        super().__init__(f"{name!r} is refused under root {root}: {reason}", location=root)
        self.name = name
        self.root = root
        self.reason = reason


class ObjectMissing(StorageError):
    """No object (or file) at the location: this item fails, the others go on."""


class ObjectChanged(StorageError):
    """The object's bytes are no longer those recorded when the job was submitted."""


class StorageUnavailable(StorageError):
    """The store kept throttling or timing out after the configured retries: this item fails
    (a later run may succeed)."""


class StorageMisconfigured(StorageError):
    """Every item would fail the same way (an unsupported scheme, a backend not installed, a
    credential written into a URL): the job stops with this message."""

    stops_job = True


class StorageAccessDenied(StorageMisconfigured):
    """The store refused the credential (access denied, unknown key, bad signature, no
    credential at all): a wrong credential fails every item, so the job stops early."""


class LocationRefused(StorageError):
    """A location the reading's policy does not allow (:mod:`.access`): outside ``--root``, a
    manifest's URL nobody opted into, a private or metadata address, a user or password in the
    URL.  Decided before any request, so nothing is sent; this item fails, the others go on.
    ``reason``: why, without the location (for a message that names it already)."""

    def __init__(self, message: str, location: str = "", reason: str | None = None) -> None:
        super().__init__(message, location)
        self.reason = reason or message


class ObjectTooLarge(StorageError):
    """The object is larger than ``AGENTIC_IQA_MAX_OBJECT_BYTES``: refused from its declared
    size, or cut off once that many bytes arrived, and never stored in the object cache."""
