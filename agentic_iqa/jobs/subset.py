"""Which rows of a manifest or dataset a job takes: ``--offset``, ``--limit``, ``--sample``.

``--offset K`` skips the first K rows and ``--limit N`` takes the next N, in file order.
``--sample N --seed S`` takes N rows at random, chosen by a seeded hash of each row's own
identity (its ``id``, else its image path and question): the rows whose hashes are the N
smallest.  So the same seed picks the same rows of the same source whatever order its rows come
in, a row's chance does not depend on where it is, and the choice streams: only the N rows
chosen so far are held, never the whole manifest.  The chosen rows come out in file order.

Applied to raw rows, before any image is opened: a 10-row sample of a 100,000-row manifest
checks 10 images.  Offset and limit go first, so ``--limit 500 --sample 100`` is 100 rows
drawn from the first 500.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import posixpath
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

#: A raw row as the readers give it: its line and its cells, or why it could not be parsed.
RawRow = tuple[int, Mapping[str, Any] | str]


def row_identity(line: int, row: Mapping[str, Any] | str) -> str:
    """What a row is, independent of where it is: its ``id`` cell, else its image path
    (normalised: ``./a.jpg`` is ``a.jpg``) with its question and options; a row that could not
    be parsed has only its line."""
    if isinstance(row, str):
        return f"<unreadable line {line}>"
    given = row.get("id")
    if given is not None and str(given).strip():
        return f"id:{str(given).strip()}"
    image = str(row.get("image") or "").strip().replace("\\", "/")
    image = posixpath.normpath(image) if image else f"<no image, line {line}>"
    question = row.get("query")
    options = row.get("options")
    if question is None and options is None:
        return f"image:{image}"
    return "image:" + json.dumps([image, str(question), str(options)], ensure_ascii=False)


def rank(seed: int, identity: str) -> int:
    """A row's place in the seed's random order: 64 bits of a keyed hash of its identity
    (stable across processes and Python versions, unlike ``hash()``)."""
    digest = hashlib.blake2b(
        identity.encode("utf-8", "surrogatepass"), digest_size=8, key=str(seed).encode()[:64]
    ).digest()
    return int.from_bytes(digest, "big")


class RowChoice(Protocol):
    """What chooses the rows a reader goes on with (:class:`Subset`, or a draw within one),
    given its raw rows before any is checked."""

    def apply(self, rows: Iterable[RawRow]) -> Iterator[RawRow]: ...


def draw(entries: Iterable[T], count: int, ranked: Callable[[T], int]) -> Iterator[T]:
    """The ``count`` entries of smallest rank (ties: the earlier), in their own order, holding
    no more than ``count`` of them at any time."""
    kept: list[tuple[int, int, T]] = []  # (-rank, -position, entry): kept[0] is the worst kept
    for position, entry in enumerate(entries):
        candidate = (-ranked(entry), -position, entry)
        if len(kept) < count:
            heapq.heappush(kept, candidate)
        elif candidate[:2] > kept[0][:2]:  # ranked before the worst kept
            heapq.heapreplace(kept, candidate)
    for _, _, entry in sorted(kept, key=lambda candidate: -candidate[1]):
        yield entry


@dataclass(frozen=True)
class Subset:
    """The rows a job takes of its source (the module docstring says how)."""

    offset: int = 0
    limit: int | None = None
    sample: int | None = None
    seed: int = 0

    @property
    def whole(self) -> bool:
        """Every row: nothing skipped, cut or drawn."""
        return not self.offset and self.limit is None and self.sample is None

    def apply(self, rows: Iterable[RawRow]) -> Iterator[RawRow]:
        """The chosen rows of ``rows``, in their order."""
        stop = None if self.limit is None else self.offset + self.limit
        window = islice(rows, self.offset, stop) if self.offset or stop is not None else iter(rows)
        if self.sample is None:
            yield from window
            return
        yield from draw(window, self.sample, lambda raw: rank(self.seed, row_identity(*raw)))

    def size(self, rows: int) -> int:
        """How many rows the job takes of a source with ``rows`` rows."""
        left = max(0, rows - self.offset)
        if self.limit is not None:
            left = min(left, self.limit)
        if self.sample is not None:
            left = min(left, self.sample)
        return left

    def describe(self) -> str:
        """ "sample 40, seed 1, from rows 101-600", or "" for every row: what a report and the
        job list say of it."""
        parts = []
        if self.sample is not None:
            parts += [f"sample {self.sample}", f"seed {self.seed}"]
        if self.offset or self.limit is not None:
            first = self.offset + 1
            span = (
                f"rows {first}-{self.offset + self.limit}"
                if self.limit is not None
                else f"rows {first} onwards"
            )
            parts.append(("from " if parts else "") + span)
        return ", ".join(parts)

    @classmethod
    def of(cls, spec: Mapping[str, Any] | Any) -> Subset:
        """The subset a job spec (or its stored document, from ``spec.describe()``) names."""
        get = (
            spec.get
            if isinstance(spec, Mapping)
            else (lambda key, default=None: getattr(spec, key, default))
        )
        sample = get("sample")
        return cls(
            offset=int(get("offset") or 0),
            limit=get("limit"),
            sample=sample,
            seed=int(get("seed") or 0) if sample is not None else 0,
        )


__all__ = ["RawRow", "RowChoice", "Subset", "draw", "rank", "row_identity"]
