"""A job's items as columns: what a report, a comparison and their figures read, in numpy arrays.

A report of a million items cannot keep a dict per row (1.2 KB each).  It keeps, per item and
in the export's order, a few numbers (MOS, score, each tool's raw and [1, 5] score, as float
arrays with NaN where there is none), small codes (done, failed, the MCQ outcome, the
distortion group) and, for a comparison, a 64-bit digest of the item's id and of its image; the
rest it needs only counted (statuses, failure reasons, who answered, tools used, fallbacks), so
it is tallied as it is read.

The same columns come from two places, so a report reads the same whichever it is given:
exported rows (a live job's, or a CSV's text cells: :meth:`JobColumns.from_rows`), or the
database a page at a time (:func:`agentic_iqa.db.exports.report_columns`), through one
:class:`ColumnsBuilder`.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..redact import redact
from .cells import number, text
from .errors import readable
from .export import RAW_PREFIX, TOOL_PREFIX
from .unread import unread_kind

#: An item's MCQ outcome (``JobColumns.mcq``): not counted (no correct letter, or not run),
#: right, wrong, finished without a letter, failed (counted wrong).
NOT_COUNTED, RIGHT, WRONG, NO_ANSWER, FAILED = range(5)
#: Rows a :meth:`JobColumns.from_rows` collects before turning them into a page.
ROWS_PER_PAGE = 5000


def digest(value: str) -> int:
    """A 64-bit digest of an item id or an image (BLAKE2b): equal ids match across jobs.  Two
    different ids share one with a chance of about n^2 / 2^65 (1e-8 for two jobs of a million
    items); an id is never stored whole for a comparison, which would cost ~100 bytes an item."""
    return int.from_bytes(
        hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little"
    )


def digests(values: Sequence[str]) -> np.ndarray:
    """:func:`digest` of each of ``values``, as a uint64 array (the bytes joined once and read
    as little-endian integers, not an int built per value)."""
    blake2b = hashlib.blake2b
    joined = b"".join(
        [
            blake2b(value.encode("utf-8", "surrogatepass"), digest_size=8).digest()
            for value in values
        ]
    )
    return np.frombuffer(joined, dtype="<u8").astype(np.uint64)


def _stripped(value: Any) -> str | None:
    """:func:`.cells.text` of a cell, a text cell without a call (ids, a million a job)."""
    if value.__class__ is str:
        return value.strip() or None
    return text(value)


def _each(values: Sequence[Any], convert: Any) -> list[Any]:
    """``convert`` of each value, computed once per distinct value (a page's statuses and
    queries repeat a few values); unhashable cells are converted one by one."""
    try:
        known = {value: convert(value) for value in set(values)}
    except TypeError:
        return [convert(value) for value in values]
    return [known[value] for value in values]


@dataclass
class Page:
    """Some items' cells, one sequence per field in item order: typed values from the database
    (numbers as float arrays, NaN for none) or a row's cells (text from a CSV).

    ``question_type``, ``meta`` and ``query``: an item's question type, its dataset's extras
    (the distortion and level), and the query it was asked (its own, else the job's).
    ``tools``: the names that gave a [1, 5] score (the export's ``tools`` cell); ``fallbacks``:
    its fallback count (None: the reader tallies ``tool_usage`` itself).  ``item`` and ``image``
    are read only with identities (comparisons) and for failed items.
    """

    status: Sequence[Any]
    mos: Sequence[Any] | np.ndarray
    score: Sequence[Any] | np.ndarray
    truth: Sequence[Any]
    answer: Sequence[Any]
    query: Sequence[Any]
    question_type: Sequence[Any]
    meta: Sequence[Any]
    error: Sequence[Any]
    item: Sequence[Any]
    image: Sequence[Any]
    answered_by: Sequence[Any]
    tools: Sequence[Any] | None
    fallbacks: Sequence[Any] | np.ndarray
    raw: dict[str, Sequence[Any] | np.ndarray] = field(default_factory=dict)
    normalized: dict[str, Sequence[Any] | np.ndarray] = field(default_factory=dict)
    #: Names with a ``tool:`` column in these rows (a tool that scored nothing has one too).
    tool_columns: Sequence[str] = ()
    #: Why no answer was read, per item: a kind (:data:`.unread.UNREAD_KINDS`) or the reason in
    #: words (an export's ``unread`` cell); None where one was (None for all: not read).
    unread: Sequence[Any] | None = None


@dataclass
class JobColumns:
    """A job's items as arrays in item order, and its tallies (see the module's docstring)."""

    size: int = 0
    done: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    failed: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    mos: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: The quality score of a done item; NaN for the others.
    score: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: Per tool, its mean raw and mean [1, 5] score of each item (NaN: none).
    raw: dict[str, np.ndarray] = field(default_factory=dict)
    normalized: dict[str, np.ndarray] = field(default_factory=dict)
    #: Tools with a ``tool:`` column, or with a raw score, in the order first seen; those with
    #: a ``tool:`` column.
    tools: list[str] = field(default_factory=list)
    tool_columns: list[str] = field(default_factory=list)
    #: :data:`RIGHT` ... per item; ``asked``: a correct answer is given and the item ran (the
    #: report's questions per type count those); ``question_type``: index into
    #: ``question_types`` ("" for none), -1 where not asked.
    mcq: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    asked: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    question_type: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    question_types: list[str] = field(default_factory=list)
    #: Items that are questions (a correct answer, or options in the query), and whose
    #: correct answer is a letter; their counts, those without a correct answer, and those with
    #: one that did not run.
    question: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    truth_letter: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    questions: int = 0
    withheld: int = 0
    not_run: int = 0
    #: Distortion type and level per item with a MOS (indices into the names; -1: none).
    distortion: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    level: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    distortion_names: list[str] = field(default_factory=list)
    level_names: list[str] = field(default_factory=list)
    #: A distortion type's index in its dataset's list (its order in tables).
    distortion_order: dict[str, str] = field(default_factory=dict)
    #: With identities: each item's id and image digests (0 and ``has_key`` False: no id),
    #: and its id's rank among the job's ids in code-point order (the order a comparison's
    #: shared items are resampled in); a job read only to be matched with a baseline has
    #: neither ranks nor image digests (None: only the baseline's are used).
    key: np.ndarray | None = None
    has_key: np.ndarray | None = None
    key_rank: np.ndarray | None = None
    image: np.ndarray | None = None
    statuses: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    #: A failure reason's first item and its whole (readable, redacted) error.
    examples: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    answered_by: Counter[str] = field(default_factory=Counter)
    #: Done items whose answer could not be read, by kind (:func:`.unread.unread_kind`).
    unread: Counter[str] = field(default_factory=Counter)
    tool_usage: Counter[str] = field(default_factory=Counter)
    fallbacks: int = 0
    items_with_fallbacks: int = 0
    #: Items with a MOS.
    with_mos: int = 0
    #: Images of the items that ran (done or failed), kept only from rows: the in-sample check
    #: of a job read from rows; a database's job is checked by its stored digests instead.
    ran_images: list[str] | None = None
    #: The in-sample check's counts, where the reader made it (:mod:`.in_sample`).
    fitted_overlap: dict[str, int] | None = None

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]], *, identities: bool = True) -> JobColumns:
        """The columns of exported rows (typed, or a CSV's text); ``identities``: digest each
        item's id and image, and rank the ids, for a comparison."""
        builder = ColumnsBuilder(identities=identities, keep_images=True, rank_keys=True)
        batch: list[Mapping[str, Any]] = []
        names: set[str] = set()
        for row in rows:
            batch.append(row)
            if len(batch) >= ROWS_PER_PAGE:
                builder.add(_page_of_rows(batch, names))
                batch = []
        if batch:
            builder.add(_page_of_rows(batch, names))
        return builder.finish()

    def positions(self, column: np.ndarray) -> np.ndarray:
        """Where ``column`` (a score) and the MOS are both known, in item order."""
        return np.flatnonzero(~np.isnan(column) & ~np.isnan(self.mos))


def _page_of_rows(rows: list[Mapping[str, Any]], names: set[str]) -> Page:
    """A page from exported rows: their cells as they are, a column per tool found so far
    (a tool first seen later is NaN in earlier pages)."""
    for row in rows:
        names.update(key[len(TOOL_PREFIX) :] for key in row if key.startswith(TOOL_PREFIX))
        names.update(key[len(RAW_PREFIX) :] for key in row if key.startswith(RAW_PREFIX))

    def cells(key: str) -> list[Any]:
        return [row.get(key) for row in rows]

    tool_columns: list[str] = []
    for row in rows:  # in the order the rows name them, as a report met them
        for key in row:
            if key.startswith(TOOL_PREFIX) and key[len(TOOL_PREFIX) :] not in tool_columns:
                tool_columns.append(key[len(TOOL_PREFIX) :])
    return Page(
        status=cells("status"),
        mos=cells("mos"),
        score=cells("quality_score"),
        truth=cells("answer_truth"),
        answer=cells("final_answer"),
        query=cells("query"),
        question_type=cells("question_type"),
        meta=cells("meta"),
        error=cells("error"),
        item=cells("item_id"),
        image=cells("image"),
        answered_by=cells("answered_by"),
        unread=cells("unread"),
        tools=cells("tools"),
        fallbacks=cells("fallbacks"),
        raw={name: cells(f"{RAW_PREFIX}{name}") for name in sorted(names)},
        normalized={name: cells(f"{TOOL_PREFIX}{name}") for name in sorted(names)},
        tool_columns=tool_columns,
    )


def _floats(values: Sequence[Any] | np.ndarray) -> np.ndarray:
    """Cells as floats, NaN where a cell is no finite number (as :func:`.cells.number`)."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "f":
        result = values.astype(float, copy=True)
        result[~np.isfinite(result)] = math.nan
        return result
    return np.array(
        [math.nan if (value := number(cell)) is None else value for cell in values], dtype=float
    )


class _Field:
    """One field's values, page after page: written into one array of the size the reader
    expects when it knows it (grown if more come), else kept as pages joined at the end.

    A million items' field read as 200 pages of 5,000 and then joined is held twice while it
    is joined, and its pages (under malloc's mmap threshold) leave the heap fragmented: the
    process keeps far more than the columns' own size.  One array of the job's size, allocated
    once, does neither."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.array: np.ndarray | None = None
        self.pages: list[np.ndarray] = []
        self.size = 0

    def add(self, values: np.ndarray) -> None:
        end = self.size + values.size
        if not self.expected:
            self.pages.append(values)
        else:
            if self.array is None:
                self.array = np.empty(max(self.expected, end), dtype=values.dtype)
            elif end > self.array.size:
                grown = np.empty(max(end, 2 * self.array.size), dtype=self.array.dtype)
                grown[: self.size] = self.array[: self.size]
                self.array = grown
            self.array[self.size : end] = values
        self.size = end

    def result(self, dtype: Any) -> np.ndarray:
        """The values, the field let go of them."""
        array, self.array = self.array, None
        if array is None:
            pages, self.pages = self.pages, []
            return np.concatenate(pages) if pages else np.zeros(0, dtype=dtype)
        return array if array.size == self.size else array[: self.size].copy()


class ColumnsBuilder:
    """Collects :class:`Page` after page into one :class:`JobColumns` (each field in one array
    of the job's size when the reader knows it, else as pages joined at the end)."""

    def __init__(
        self,
        *,
        identities: bool = False,
        keep_images: bool = False,
        rank_keys: bool = False,
        image_digests: bool = True,
        breakdown: bool = True,
        scores: bool = True,
        expected: int = 0,
    ) -> None:
        """``identities``: digest ids and images (a comparison); ``keep_images``: keep the
        images of the items that ran (rows); ``rank_keys``: keep the ids' text to rank them
        at the end (rows; the database ranks its own); ``image_digests`` False: ids only (a
        job compared with a baseline: only the baseline's images group its items);
        ``breakdown`` False: no distortion, level, question type nor ``asked`` per item, and
        ``scores`` False: no quality score per item (a comparison, which reads none of them
        and a tool's scores for a metric job: empty arrays); ``expected``: the items to come,
        where known (the arrays are made that size)."""
        from ..query import options_in

        self.identities = identities
        self.image_digests = image_digests
        self.expected = expected
        self.skipped = (
            {"asked", "question_type", "distortion", "level"} if not breakdown else set()
        ) | ({"score"} if not scores else set())
        self.breakdown = breakdown
        self.columns = JobColumns(ran_images=[] if keep_images else None)
        self.parts: dict[str, _Field] = {}
        self.tool_parts: dict[str, dict[str, _Field]] = {"raw": {}, "normalized": {}}
        self._options_in = options_in
        self._question_cache: dict[str, bool] = {}
        self._meta_cache: dict[str, tuple[str | None, str | None, str | None]] = {}
        self._type_index: dict[str, int] = {}
        self._level_index: dict[str, int] = {}
        self._qtype_index: dict[str, int] = {}
        self._key_rank_source: list[str] | None = [] if identities and rank_keys else None

    def _part(self, name: str, values: np.ndarray) -> None:
        if name in self.skipped:
            return
        field = self.parts.get(name)
        if field is None:
            field = self.parts[name] = _Field(self.expected)
        field.add(values)

    def _is_question(self, query: Any) -> bool:
        value = text(query)
        if not value:
            return False
        known = self._question_cache.get(value)
        if known is None:
            known = bool(self._options_in(value))
            if len(self._question_cache) < 10_000:
                self._question_cache[value] = known
        return known

    def _distortion(self, meta: Any) -> tuple[str | None, str | None, str | None]:
        from .breakdown import distortion_of

        if not isinstance(meta, str):
            return distortion_of(meta)
        found = self._meta_cache.get(meta)
        if found is None:
            found = distortion_of(meta)
            if len(self._meta_cache) < 10_000:
                self._meta_cache[meta] = found
        return found

    def add(self, page: Page) -> None:
        """Fold one page in."""
        from .errors import failure_reason
        from .metrics import answer_letter

        columns = self.columns
        size = len(page.status)
        before = columns.size
        statuses = _each(page.status, lambda status: text(status) or "unknown")
        columns.statuses.update(statuses)
        named = np.array(statuses, dtype=object)
        done = named == "done"
        failed = named == "failed"
        del named
        mos = _floats(page.mos)
        score = _floats(page.score)
        score[~done] = math.nan
        columns.with_mos += int(np.count_nonzero(~np.isnan(mos)))
        columns.answered_by.update(str(value) for value in page.answered_by if value)
        if page.unread is not None:  # a few cells say why, the rest are None
            columns.unread.update(
                kind
                for i, cell in enumerate(page.unread)
                if cell is not None and done[i] and (kind := unread_kind(text(cell))) is not None
            )
        for i in np.flatnonzero(failed).tolist():
            error = page.error[i]
            reason = failure_reason(error)
            columns.failures[reason] += 1
            columns.examples.setdefault(reason, (text(page.item[i]), redact(readable(text(error)))))
        mcq = np.zeros(size, dtype=np.int8)
        asked = np.zeros(size, dtype=bool)
        qtype = np.full(size, -1, dtype=np.int32)
        question = np.zeros(size, dtype=bool)
        truth_letter = np.zeros(size, dtype=bool)
        truths = [None if cell is None else text(cell) for cell in page.truth]
        # Without a correct answer an item is a question when its query gives options: asked
        # once per distinct query of the page (most pages have one).
        unasked = [i for i, truth in enumerate(truths) if truth is None]
        if unasked:
            options = _each([page.query[i] for i in unasked], self._is_question)
            withheld = [i for i, given in zip(unasked, options, strict=True) if given]
            question[withheld] = True
            columns.withheld += len(withheld)
        for i, truth in enumerate(truths):
            if truth is None:
                continue
            question[i] = True
            letter = answer_letter(truth)
            truth_letter[i] = letter is not None
            if not (done[i] or failed[i]):
                columns.not_run += 1
                continue
            asked[i] = True
            question_kind = text(page.question_type[i]) or ""
            qtype[i] = self._qtype_index.setdefault(question_kind, len(self._qtype_index))
            if letter is None:
                continue
            if failed[i]:
                mcq[i] = FAILED
                continue
            given = answer_letter(text(page.answer[i]))
            mcq[i] = NO_ANSWER if given is None else RIGHT if given == letter else WRONG
        if isinstance(page.fallbacks, np.ndarray):
            counts = np.nan_to_num(page.fallbacks.astype(float)).astype(np.int64)
        else:
            counts = np.array([int(number(value) or 0) for value in page.fallbacks], dtype=np.int64)
        columns.fallbacks += int(counts.sum())
        columns.items_with_fallbacks += int(np.count_nonzero(counts > 0))
        for cell in page.tools or ():
            names = text(cell)
            if names:
                columns.tool_usage.update(name for name in names.split(";") if name.strip())
        kinds = np.full(size, -1, dtype=np.int32)
        levels = np.full(size, -1, dtype=np.int32)
        has_mos = ~np.isnan(mos)
        for i in (
            [i for i, meta in enumerate(page.meta) if meta is not None] if self.breakdown else ()
        ):
            if not has_mos[i]:
                continue
            kind, index, level = self._distortion(page.meta[i])
            if kind is None and level is None:
                continue
            if kind is not None:
                kinds[i] = self._type_index.setdefault(kind, len(self._type_index))
                if index is not None:
                    columns.distortion_order.setdefault(kind, index)
            if level is not None:
                levels[i] = self._level_index.setdefault(level, len(self._level_index))
        columns.questions += int(np.count_nonzero(question))
        for name in page.tool_columns:
            if name not in columns.tools:
                columns.tools.append(name)
            if name not in columns.tool_columns:
                columns.tool_columns.append(name)
        for kind, supplied in (("raw", page.raw), ("normalized", page.normalized)):
            known = self.tool_parts[kind]
            for name in {*supplied, *known}:
                values = _floats(supplied[name]) if name in supplied else np.full(size, math.nan)
                if name not in known:
                    known[name] = _Field(self.expected)
                    if before:
                        known[name].add(np.full(before, math.nan))
                known[name].add(values)
                if (
                    kind == "raw"
                    and name not in columns.tools
                    and np.count_nonzero(~np.isnan(values))
                ):
                    columns.tools.append(name)
        if columns.ran_images is not None:
            columns.ran_images += [
                str(page.image[i]) for i in np.flatnonzero(done | failed).tolist() if page.image[i]
            ]
        if self.identities:
            ids = [_stripped(cell) for cell in page.item]
            has_key = np.fromiter((key is not None for key in ids), dtype=bool, count=size)
            keys = np.zeros(size, dtype=np.uint64)
            keys[has_key] = digests([key for key in ids if key is not None])
            if self._key_rank_source is not None:
                self._key_rank_source += [key or "" for key in ids]
            self._part("key", keys)
            self._part("has_key", has_key)
            if self.image_digests:
                # An image's digest once a page (several items may show one image), an item
                # without one its id's.
                images = keys.copy()
                shown = [_stripped(cell) for cell in page.image]
                distinct = list(dict.fromkeys(image for image in shown if image is not None))
                if distinct:
                    which = {image: k for k, image in enumerate(distinct)}
                    at = [i for i, image in enumerate(shown) if image is not None]
                    images[at] = digests(distinct)[
                        [which[image] for image in shown if image is not None]
                    ]
                self._part("image", images)
        for name, values in (
            ("done", done),
            ("failed", failed),
            ("mos", mos),
            ("score", score),
            ("mcq", mcq),
            ("asked", asked),
            ("question_type", qtype),
            ("question", question),
            ("truth_letter", truth_letter),
            ("distortion", kinds),
            ("level", levels),
        ):
            self._part(name, values)
        columns.size += size

    def ranks_from_keys(self) -> None:
        """Rank the ids kept as text (rows: few enough to sort here)."""
        assert self._key_rank_source is not None
        source = self._key_rank_source
        order = sorted(range(len(source)), key=source.__getitem__)
        rank = np.empty(len(source), dtype=np.int64)
        rank[np.array(order, dtype=np.int64)] = np.arange(len(source), dtype=np.int64)
        self.columns.key_rank = rank

    def finish(self, *, key_rank: np.ndarray | None = None) -> JobColumns:
        """The columns; ``key_rank``: the ids' ranks when the reader knows them (the database
        orders ids itself, so none is kept as text)."""
        columns = self.columns
        empty = {
            "done": bool,
            "failed": bool,
            "mos": float,
            "score": float,
            "mcq": np.int8,
            "asked": bool,
            "question_type": np.int32,
            "question": bool,
            "truth_letter": bool,
            "distortion": np.int32,
            "level": np.int32,
            "key": np.uint64,
            "has_key": bool,
            "image": np.uint64,
        }
        # Each field's pages let go as it is joined: the job's columns are held once, not twice.
        for name, dtype in empty.items():
            field = self.parts.pop(name, None)
            if field is None and name in ("key", "has_key", "image"):
                continue
            setattr(
                columns,
                name,
                field.result(dtype) if field is not None else np.zeros(0, dtype=dtype),
            )
        for kind, target in (("raw", columns.raw), ("normalized", columns.normalized)):
            fields = self.tool_parts[kind]
            for name in list(fields):
                target[name] = fields.pop(name).result(float)
        columns.question_types = list(self._qtype_index)
        columns.distortion_names = list(self._type_index)
        columns.level_names = list(self._level_index)
        if self.identities:
            if self._key_rank_source is not None:
                self.ranks_from_keys()
            else:
                columns.key_rank = key_rank
        self.parts.clear()
        return columns
