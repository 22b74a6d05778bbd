"""How well the builtin agent scores real photos and answers questions about degraded ones,
measured on data disjoint from everything it was fitted or calibrated on.

The protocol
------------
* LIVE-C dev is split by a hash of each file name (:func:`part_of`): FIT (about 60 %) and
  HELD-OUT (about 40 %).  The rule and the sizes are written into the shipped parameters'
  metadata.
* ``--fit`` uses FIT photos only: the severity thresholds, the per-category detectors (yes/no) and
  the which-distortion model are calibrated on FIT photos degraded by the *calibration* generator
  (agentic_iqa.fitting.degradations, levels 0-4, every one of its two or three processes per kind:
  agentic_iqa.fitting.degradations.SHAPES).  It writes agentic_iqa/vlm/builtin/severity.json.
  The overall opinion (opinion.json) is chosen by ``studies/opinion_selection.py`` and no
  longer refitted here (its helpers below, ``cv_predictions``, ``nested_cv``, serve that study).
* The report uses HELD-OUT photos only: scoring-mode SRCC/PLCC against MOS (bootstrap 95 %
  intervals) of the agent's fused score next to BRISQUE, NIQE and PIQE alone; and multiple-choice
  accuracy on HELD-OUT photos degraded by the *test* generator
  (agentic_iqa.fitting.evaluation_degradations: defocus and motion blur, shot noise, off-grid 4:4:4
  JPEG, gamma curves, mid-grey contrast curves, HSV desaturation), a different process from the
  calibration one, so in-distribution tuning shows up as a drop.  Question kinds: yes/no (the
  applied distortion, expected Yes, and one it does not cause, expected No), which distortion (no
  reference), which distortion with the original as reference, and severity (5 options); per
  distortion kind, with the severity confusion matrix.

* ``--dev`` is for development and reads FIT photos only: FIT is split again by a hash
  (:func:`dev_split`) into DEV-CAL (calibrates the thresholds, in memory) and DEV-VAL (the test
  generator's questions, answered from the measurements by the builtin's own option logic, with
  where the errors are: which-distortion confusions, yes/no errors per asked category, severity
  per kind).  It takes seconds once the measurements are cached, writes nothing, and never
  looks at HELD-OUT, so HELD-OUT stays a one-look figure.

    python benchmarks/agent_quality.py ../shared/data/livec-dev \\
        --weights-dir ../shared/data/pyiqa-weights [--fit] [--mcq-images 6]
    python benchmarks/agent_quality.py ../shared/data/livec-dev --dev

Tool scores and calibration measurements are cached under ``--cache`` (default
/tmp/agentic-iqa-agent-quality), so a second run takes a fraction of the first.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import pickle
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from PIL import Image
from scipy.stats import pearsonr, spearmanr

from agentic_iqa.agents.fusion import ETA, fuse
from agentic_iqa.agents.team import Agents
from agentic_iqa.fitting import degradations as synthetic
from agentic_iqa.fitting import evaluation_degradations as evaluation
from agentic_iqa.fitting.opinion import fit as fit_opinion
from agentic_iqa.fitting.opinion import fusion_target
from agentic_iqa.fitting.severity import calibrate
from agentic_iqa.pipeline import run_inprocess
from agentic_iqa.query import categories_in, options_in
from agentic_iqa.vlm.builtin import BuiltinClient
from agentic_iqa.vlm.builtin import answer as builtin_answer
from agentic_iqa.vlm.builtin import measure as measure_module
from agentic_iqa.vlm.builtin.answer import OPINION_SIGMA
from agentic_iqa.vlm.builtin.measure import Measurements, measure
from agentic_iqa.vlm.builtin.opinion import (
    WEIGHTS_FILE,
)
from agentic_iqa.vlm.builtin.severity import (
    THRESHOLDS_FILE,
    Thresholds,
    category_scores,
    default_thresholds,
    dominance,
    presence,
)
from iqa_tools import ToolRegistry, ToolSettings

TOOLS = ("BRISQUE", "NIQE", "PIQE")
QUERY = "Rate the quality of this image."

SPLIT_SALT = "agentic-iqa/livec-dev split v1"
SPLIT_RULE = (
    f"FIT iff int(sha256('{SPLIT_SALT}:' + file name).hexdigest()[:8], 16) % 5 < 3, else HELD-OUT"
)

TYPE_QUESTION = (
    "Which distortion is most severe in this image? A. Blur B. Noise "
    "C. JPEG compression D. Brightness change E. Low contrast F. Colour distortion"
)
TYPE_ANSWER = {
    "Blurs": "A",
    "Noise": "B",
    "Compression": "C",
    "Brightness change": "D",
    "Contrast": "E",
    "Color distortions": "F",
}
SEVERITY_QUESTION = (
    "How severe is the {word} in this image? A. none B. slight C. moderate D. severe E. extreme"
)
WORDS = {
    "Blurs": "blur",
    "Noise": "noise",
    "Compression": "JPEG compression",
    "Brightness change": "brightness change",
    "Contrast": "contrast",
    "Color distortions": "colour distortion",
}
YES_NO_QUESTION = {
    "Blurs": "Is this image blurry? A. Yes B. No",
    "Noise": "Is this image noisy? A. Yes B. No",
    "Compression": "Does this image show JPEG compression artefacts? A. Yes B. No",
    "Brightness change": "Is the brightness of this image wrong (too dark or too bright)? "
    "A. Yes B. No",
    "Contrast": "Does this image have too little contrast? A. Yes B. No",
    "Color distortions": "Are the colours of this image washed out or distorted? A. Yes B. No",
}
#: Categories a test degradation does not cause, for the yes/no questions expecting No.
DISTRACTORS = {
    "Blurs": ("Noise", "Brightness change", "Color distortions"),
    "Noise": ("Blurs", "Brightness change", "Color distortions"),
    "Compression": ("Noise", "Brightness change"),
    "Brightness change": ("Blurs", "Compression"),
    "Contrast": ("Blurs", "Compression", "Noise"),
    "Color distortions": ("Blurs", "Noise", "Compression"),
}
QUESTION_KINDS = ("yes/no", "which distortion", "which vs reference", "severity")


# -- data and split ---------------------------------------------------------------------------


def part_of(name: str) -> str:
    """FIT or HELD-OUT, from the file name alone (stable when photos are added)."""
    digest = hashlib.sha256(f"{SPLIT_SALT}:{name}".encode()).hexdigest()
    return "FIT" if int(digest[:8], 16) % 5 < 3 else "HELD-OUT"


def read_mos(folder: Path) -> dict[str, float]:
    with (folder / "mos.csv").open() as handle:
        return {row["image"]: float(row["mos"]) for row in csv.DictReader(handle)}


def split(names: Sequence[str]) -> tuple[list[str], list[str]]:
    fit = [n for n in names if part_of(n) == "FIT"]
    held = [n for n in names if part_of(n) == "HELD-OUT"]
    return fit, held


def spread_subset(names: Sequence[str], count: int | None, salt: str) -> list[str]:
    """``count`` names chosen by hash (not by MOS or order), deterministic; all if None."""
    ordered = sorted(names, key=lambda n: hashlib.sha256(f"{salt}:{n}".encode()).hexdigest())
    return sorted(ordered if count is None else ordered[:count])


def target_of(mos: float) -> float:
    return 1.0 + 4.0 * mos / 100.0


def code_version() -> str:
    """Measurement code digest: cached measurements are reused only for the same code."""
    source = Path(measure_module.__file__).read_bytes()
    return hashlib.sha256(source + Path(synthetic.__file__).read_bytes()).hexdigest()[:12]


# -- statistics -------------------------------------------------------------------------------


def correlations(predicted: Sequence[float], truth: Sequence[float]) -> tuple[float, float]:
    return float(spearmanr(predicted, truth).statistic), float(pearsonr(predicted, truth).statistic)


def bootstrap(
    predicted: Sequence[float], truth: Sequence[float], rounds: int, seed: int
) -> dict[str, tuple[float, float, float]]:
    p, t = np.asarray(predicted, float), np.asarray(truth, float)
    rng = np.random.default_rng(seed)
    samples: dict[str, list[float]] = {"SRCC": [], "PLCC": []}
    for _ in range(rounds):
        index = rng.integers(0, len(p), len(p))
        if np.ptp(p[index]) == 0 or np.ptp(t[index]) == 0:
            continue
        srcc, plcc = correlations(p[index], t[index])
        samples["SRCC"].append(srcc)
        samples["PLCC"].append(plcc)
    srcc, plcc = correlations(p, t)
    return {
        name: (
            value,
            float(np.percentile(samples[name], 2.5)),
            float(np.percentile(samples[name], 97.5)),
        )
        for name, value in (("SRCC", srcc), ("PLCC", plcc))
    }


def wilson(correct: int, total: int, z: float = 1.96) -> tuple[float, float]:
    if total == 0:
        return math.nan, math.nan
    p = correct / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return centre - half, centre + half


def fused(estimate: float, tool: float | None) -> float:
    """What the summarizer makes of the builtin's opinion ``estimate`` and the tool score."""
    logits = {c: -((c - estimate) ** 2) / (2 * OPINION_SIGMA**2) for c in range(1, 6)}
    top = max(logits.values())
    return fuse([] if tool is None else [tool], {c: math.exp(v - top) for c, v in logits.items()})


def _fit_rows(rows: list[dict[str, float]], targets: list[float], ridge: float):
    """An opinion model fitted to the fusion-aware targets of ``rows``."""
    aware = [
        fusion_target(t, row.get("tool_mean"), OPINION_SIGMA, ETA)
        for row, t in zip(rows, targets, strict=True)
    ]
    return fit_opinion(rows, aware, ridge=ridge)


def _fused_predictions(model, rows: list[dict[str, float]]) -> list[float]:
    return [fused(model.predict(row, None), row.get("tool_mean")) for row in rows]


def cv_predictions(
    rows: list[dict[str, float]], targets: list[float], ridge: float, folds: int, seed: int
) -> list[float]:
    """Out-of-fold fused scores of opinion models with a fixed penalty."""
    order = [int(i) for i in np.random.default_rng(seed).permutation(len(rows))]
    predicted = [0.0] * len(rows)
    for fold in range(folds):
        held = set(order[fold::folds])
        train = [i for i in order if i not in held]
        model = _fit_rows([rows[i] for i in train], [targets[i] for i in train], ridge)
        for i in held:
            predicted[i] = _fused_predictions(model, [rows[i]])[0]
    return predicted


RIDGES = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0)


def choose_ridge(
    rows: list[dict[str, float]], targets: list[float], folds: int, seed: int
) -> float:
    def quality(ridge: float) -> float:
        predicted = cv_predictions(rows, targets, ridge, folds, seed)
        return float(spearmanr(predicted, targets).statistic)

    return max(RIDGES, key=quality)


def nested_cv(
    rows: list[dict[str, float]], targets: list[float], folds: int, seed: int
) -> list[float]:
    """Out-of-fold fused scores where each outer fold chooses its own penalty by inner CV."""
    order = [int(i) for i in np.random.default_rng(seed + 1).permutation(len(rows))]
    predicted = [0.0] * len(rows)
    for fold in range(folds):
        held = set(order[fold::folds])
        train = [i for i in order if i not in held]
        sub_rows, sub_targets = [rows[i] for i in train], [targets[i] for i in train]
        model = _fit_rows(sub_rows, sub_targets, choose_ridge(sub_rows, sub_targets, folds, seed))
        for i in held:
            predicted[i] = _fused_predictions(model, [rows[i]])[0]
    return predicted


# -- the agent and its tools ------------------------------------------------------------------


def make_agents(registry: ToolRegistry, opinion=None) -> Agents:
    client = BuiltinClient(opinion=opinion)
    return Agents(planner=client, executor=client, summarizer=client, registry=registry)


def tool_scores(registry: ToolRegistry, path: Path) -> dict[str, tuple[float, float]]:
    """(raw, normalized) per offline tool that can run here."""
    scores = {}
    for tool in TOOLS:
        if registry.availability(tool).ok:
            result = registry.execute_tool(tool, path, allow_fallback=False)
            scores[tool] = (result.raw_score, result.normalized_score)
    return scores


def evidence_tools(agents: Agents, path: Path) -> list[tuple[str, float]]:
    """The (tool, normalized score) pairs the agent's own scoring run collects."""
    state = run_inprocess(QUERY, str(path), agents=agents)
    return [
        (log.tool_name, log.normalized_score)
        for log in state["executor_evidence"].tool_logs
        if math.isfinite(log.normalized_score)
    ]


# -- --fit: calibrate severity and fit the opinion on FIT only ------------------------------


def calibration_measurements(args: argparse.Namespace, names: list[str]) -> list[tuple]:
    cache = args.cache / f"calibration-{code_version()}.pkl"
    stored: dict[str, list[tuple]] = pickle.loads(cache.read_bytes()) if cache.is_file() else {}
    started, fresh = time.perf_counter(), 0
    samples: list[tuple] = []
    for name in names:
        if name not in stored:
            image = Image.open(args.livec / "images" / name).convert("RGB")
            original = measure(np.asarray(image, dtype=np.float32) / 255.0)
            rows = [("none", 0, original, original)]
            for kind in synthetic.DEGRADATIONS:
                for level in synthetic.LEVELS:
                    for shape in synthetic.calibration_shapes(name, kind, level):
                        degraded = synthetic.degrade(image, kind, level, shape)
                        rows.append(
                            (
                                kind,
                                level,
                                measure(np.asarray(degraded, dtype=np.float32) / 255.0),
                                original,
                            )
                        )
            stored[name] = rows
            fresh += 1
        samples.extend(stored[name])
    if fresh:
        cache.write_bytes(pickle.dumps(stored))
    print(
        f"calibration measurements: {len(names)} FIT photos x "
        f"{len(synthetic.DEGRADATIONS)} kinds x 4 levels x every shape + originals "
        f"({fresh} measured now, "
        f"{time.perf_counter() - started:.0f}s)"
    )
    return samples


def fit_all(
    args: argparse.Namespace,
    registry: ToolRegistry,
    mos: dict[str, float],
    fit_names: list[str],
    held_names: list[str],
) -> None:
    provenance = {
        "split_rule": SPLIT_RULE,
        "fit_photos": len(fit_names),
        "held_out_photos": len(held_names),
        "data": "LIVE-C dev (250 photos, 500x500)",
        "fitted_by": "benchmarks/agent_quality.py --fit",
    }
    calibration_names = spread_subset(fit_names, args.calibration_images, "calibration")
    thresholds = calibrate(
        calibration_measurements(args, calibration_names),
        metadata={
            **provenance,
            "calibration_photos": len(calibration_names),
            "generator": "agentic_iqa.fitting.degradations (calibration generator), "
            "levels 0-4, every shape of every kind (synthetic.SHAPES)",
            "rule": "slight begins where degraded copies are told from clean photos with "
            "the fewest errors, each further level half-way between neighbouring levels' median "
            "readings; detection: per category a logistic regression of all indicator "
            "scores, cut at the lowest balanced error; which distortion: a multinomial "
            "logistic regression of the same scores",
        },
    )
    THRESHOLDS_FILE.write_text(thresholds.to_json())
    default_thresholds.cache_clear()
    print(f"severity thresholds from {len(calibration_names)} FIT photos -> {THRESHOLDS_FILE}")

    # The overall opinion (opinion.json) is not refitted here: the one shipped is chosen by
    # studies/opinion_selection.py, against the builtin from before issue 12 on unseen photos.
    print(f"opinion: {WEIGHTS_FILE} is left as it is (studies/opinion_selection.py chooses it)\n")


# -- the report: HELD-OUT only ----------------------------------------------------------------


def scoring_report(
    args: argparse.Namespace, agents: Agents, mos: dict[str, float], names: list[str]
) -> None:
    started = time.perf_counter()
    columns: dict[str, list[float]] = defaultdict(list)
    truth = []
    for name in names:
        path = args.livec / "images" / name
        for tool, (raw, _) in tool_scores(agents.registry, path).items():
            spec = agents.registry.get(tool)
            columns[tool].append(-raw if spec.lower_is_better else raw)
        state = run_inprocess(QUERY, str(path), agents=agents)
        columns["agent (fused)"].append(state["summarizer_result"].quality_score)
        truth.append(mos[name])
    print(
        f"scoring: {len(names)} HELD-OUT photos in {time.perf_counter() - started:.0f}s "
        "(lower-is-better tools negated)"
    )
    print(f"{'':<15}{'SRCC':>7} {'95% CI':>15}{'PLCC':>8} {'95% CI':>15}")
    for column in ("agent (fused)", *TOOLS):
        if len(columns.get(column, ())) != len(names):
            continue
        stats = bootstrap(columns[column], truth, args.bootstrap, args.seed)
        cells = "".join(
            f"{stats[k][0]:>7.3f} [{stats[k][1]:.3f}, {stats[k][2]:.3f}]" for k in ("SRCC", "PLCC")
        )
        print(f"{column:<15}{cells}")


def _answer(agents: Agents, question: str, path: Path, reference: Path | None = None) -> str:
    return run_inprocess(question, str(path), str(reference) if reference else None, agents=agents)[
        "summarizer_result"
    ].final_answer


def questions(name: str, kind: str, category: str, level: int) -> list[tuple[str, str, bool, str]]:
    """(question kind, question, asked with the reference?, expected letter) for one degraded
    copy; the yes/no distractor is chosen by hash."""
    digest = int(hashlib.sha256(f"{name}:{kind}:{level}".encode()).hexdigest(), 16)
    distractor = DISTRACTORS[category][digest % len(DISTRACTORS[category])]
    return [
        ("yes/no", YES_NO_QUESTION[category], False, "A"),
        ("yes/no", YES_NO_QUESTION[distractor], False, "B"),
        ("which distortion", TYPE_QUESTION, False, TYPE_ANSWER[category]),
        ("which vs reference", TYPE_QUESTION, True, TYPE_ANSWER[category]),
        ("severity", SEVERITY_QUESTION.format(word=WORDS[category]), False, "ABCDE"[level]),
    ]


#: One answered question: (question kind, degradation kind, level, expected, answered, asked
#: category).
Record = tuple[str, str, int, str, str, str]


def asked_category(question: str) -> str:
    """The category a yes/no or severity question asks about ("" for which-distortion)."""
    return next(iter(categories_in(question.split("A.")[0])), "")


def degraded_copies(
    livec: Path, names: Sequence[str], generator, workdir: Path
) -> Iterator[tuple[int, str, int, Path, Path, list[tuple]]]:
    """Each photo's degraded copies and their questions, as the multiple-choice report asks
    them: (photo index, kind, level, copy, reference, questions), the copy and the original
    (the reference) written under ``workdir``."""
    for photo, name in enumerate(names):
        original = Image.open(livec / "images" / name).convert("RGB")
        reference = workdir / f"{Path(name).stem}_ref.png"
        original.save(reference)
        for kind, (category, _) in generator.DEGRADATIONS.items():
            for level in generator.LEVELS:
                copy = workdir / f"{Path(name).stem}_{kind}{level}.png"
                shape = (
                    generator.calibration_shape(name, kind, level)
                    if hasattr(generator, "calibration_shape")
                    else None
                )
                (
                    generator.degrade(original, kind, level, shape)
                    if shape
                    else generator.degrade(original, kind, level)
                ).save(copy)
                yield (
                    photo,
                    kind,
                    level,
                    copy,
                    reference,
                    list(questions(name, kind, category, level)),
                )


def mcq_report(
    args: argparse.Namespace, agents: Agents, names: list[str], generator, label: str
) -> None:
    """Every question through the real pipeline (planner, executor, summarizer)."""
    workdir = Path(tempfile.mkdtemp(prefix="iqa-mcq-"))
    records: list[Record] = []
    started = time.perf_counter()
    for _, kind, level, copy, reference, asked in degraded_copies(
        args.livec, names, generator, workdir
    ):
        for question_kind, question, with_ref, expected in asked:
            answer = _answer(agents, question, copy, reference if with_ref else None)
            records.append((question_kind, kind, level, expected, answer, asked_category(question)))
        copy.unlink()
    print_mcq(
        records,
        generator,
        f"{label}: {len(names)} photos x {len(generator.DEGRADATIONS)} kinds x 4 levels",
        time.perf_counter() - started,
    )


def print_mcq(
    records: list[Record], generator, label: str, elapsed: float, details: bool = False
) -> None:
    """Accuracy overall, per question kind and per distortion, and the severity confusion; with
    ``details`` also where the errors are (which-distortion confusions, yes/no by asked
    category, severity per kind)."""
    correct: dict[tuple[str, str], int] = Counter()
    asked: dict[tuple[str, str], int] = Counter()
    confusion = np.zeros((4, 5), dtype=int)
    for question_kind, kind, level, expected, answer, _ in records:
        for key in ((question_kind, kind), (question_kind, "all")):
            asked[key] += 1
            correct[key] += answer == expected
        if question_kind == "severity" and answer in "ABCDE" and len(answer) == 1:
            confusion[level - 1, "ABCDE".index(answer)] += 1
    total_correct = sum(correct[(k, "all")] for k in QUESTION_KINDS)
    total_asked = sum(asked[(k, "all")] for k in QUESTION_KINDS)
    print(f"\nmultiple choice, {label}, {total_asked} questions in {elapsed:.0f}s")
    low, high = wilson(total_correct, total_asked)
    print(
        f"  overall            {total_correct / total_asked:.3f} [{low:.3f}, {high:.3f}] "
        f"({total_correct}/{total_asked})"
    )
    chance = {
        "yes/no": 1 / 2,
        "which distortion": 1 / 6,
        "which vs reference": 1 / 6,
        "severity": 1 / 5,
    }
    for question_kind in QUESTION_KINDS:
        c, n = correct[(question_kind, "all")], asked[(question_kind, "all")]
        low, high = wilson(c, n)
        print(
            f"  {question_kind:<18} {c / n:.3f} [{low:.3f}, {high:.3f}] ({c}/{n}; "
            f"chance {chance[question_kind]:.3f})"
        )
    print(f"\n  per distortion      {'':>2}" + "".join(f"{k:>20}" for k in QUESTION_KINDS))
    for kind in generator.DEGRADATIONS:
        cells = "".join(f"{correct[(k, kind)] / asked[(k, kind)]:>20.3f}" for k in QUESTION_KINDS)
        print(f"  {kind:<20}{cells}")
    print("\n  severity confusion (rows: true level; columns: answered)")
    print("  " + " " * 10 + "".join(f"{w:>10}" for w in synthetic.SEVERITY_OF_LEVEL.values()))
    for level in range(4):
        print(
            f"  {synthetic.SEVERITY_OF_LEVEL[level + 1]:<10}"
            + "".join(f"{v:>10d}" for v in confusion[level])
        )
    if details:
        print_errors(records, generator)


def print_errors(records: list[Record], generator) -> None:
    """Where the answers go wrong, for development."""
    letters = {v: k for k, v in TYPE_ANSWER.items()}
    for question_kind in ("which distortion", "which vs reference"):
        print(f"\n  {question_kind}: answered category per kind (correct first)")
        for kind, (category, _) in generator.DEGRADATIONS.items():
            answers = Counter(
                letters.get(a, a)
                for q, k, _, _, a, _ in records
                if q == question_kind and k == kind
            )
            shown = ", ".join(
                f"{c} {n}"
                for c, n in sorted(answers.items(), key=lambda kv: (kv[0] != category, -kv[1]))
            )
            print(f"    {kind:<16} {shown}")
    print("\n  yes/no: wrong answers by asked category (false No per level 1-4; false Yes)")
    for category in TYPE_ANSWER:
        missed = [
            sum(
                q == "yes/no" and e == "A" and a != e and c == category and lv == level
                for q, _, lv, e, a, c in records
            )
            for level in generator.LEVELS
        ]
        shown_yes = sum(
            q == "yes/no" and e == "B" and a != e and c == category for q, _, _, e, a, c in records
        )
        asked_no = sum(q == "yes/no" and e == "B" and c == category for q, _, _, e, _, c in records)
        print(f"    {category:<18} false No {missed}  false Yes {shown_yes}/{asked_no}")
    print("\n  severity per kind (rows: kind; answered letter counts per true level 1-4)")
    for kind in generator.DEGRADATIONS:
        rows = []
        for level in generator.LEVELS:
            answers = Counter(
                a for q, k, lv, _, a, _ in records if q == "severity" and k == kind and lv == level
            )
            rows.append("".join(str(answers.get(x, 0)).rjust(3) for x in "ABCDE"))
        print(f"    {kind:<16}" + " |".join(rows))


# -- --dev: develop on FIT alone --------------------------------------------------------------

DEV_SALT = "agentic-iqa/fit dev split v1"


def dev_split(fit_names: Sequence[str]) -> tuple[list[str], list[str]]:
    """FIT split again by hash: DEV-CAL (about 60 %) calibrates, DEV-VAL (40 %) validates."""

    def calibrates(name: str) -> bool:
        digest = hashlib.sha256(f"{DEV_SALT}:{name}".encode()).hexdigest()
        return int(digest[:8], 16) % 5 < 3

    return [n for n in fit_names if calibrates(n)], [n for n in fit_names if not calibrates(n)]


def test_measurements(
    args: argparse.Namespace, names: list[str]
) -> dict[str, dict[tuple[str, int], Measurements]]:
    """Measurements of each photo (key ("none", 0)) and its test-generator copies, cached."""
    source = Path(measure_module.__file__).read_bytes() + Path(evaluation.__file__).read_bytes()
    cache = args.cache / f"test-{hashlib.sha256(source).hexdigest()[:12]}.pkl"
    stored = pickle.loads(cache.read_bytes()) if cache.is_file() else {}
    fresh = [n for n in names if n not in stored]
    for name in fresh:
        image = Image.open(args.livec / "images" / name).convert("RGB")
        rows = {("none", 0): measure(np.asarray(image, dtype=np.float32) / 255.0)}
        for kind in evaluation.DEGRADATIONS:
            for level in evaluation.LEVELS:
                degraded = evaluation.degrade(image, kind, level)
                rows[(kind, level)] = measure(np.asarray(degraded, dtype=np.float32) / 255.0)
        stored[name] = rows
    if fresh:
        cache.write_bytes(pickle.dumps(stored))
    return {n: stored[n] for n in names}


def answer_from_measurements(
    question: str, m: Measurements, reference: Measurements | None, thresholds: Thresholds
) -> str:
    """The builtin summarizer's choice from the measured severities, without the pipeline
    (the same :func:`answer._choose_option` on the same category scores; tools do not change
    these question types' answers)."""
    scores = category_scores(m, reference, thresholds)
    return builtin_answer._choose_option(
        question,
        options_in(question),
        scores,
        3.0,
        present=presence(m, reference, thresholds),
        dominant=dominance(m, reference, thresholds),
    )[0]


def dev_report(args: argparse.Namespace, fit_names: list[str]) -> None:
    calibration_names, validation_names = dev_split(fit_names)
    print(f"dev split of FIT: {len(calibration_names)} DEV-CAL / {len(validation_names)} DEV-VAL")
    thresholds = calibrate(calibration_measurements(args, calibration_names))
    print(
        "detection cuts (with a reference): "
        + ", ".join(f"{c} {v:.2f}" for c, v in thresholds.detection["full_reference"].items())
    )
    for category, detector in thresholds.detectors.items():
        print(
            f"detector {category:<18} cut {detector.cut:+.2f}  "
            + " ".join(
                f"{n} {w:+.2f}"
                for n, w in sorted(detector.weights.items(), key=lambda kv: -abs(kv[1]))[:4]
            )
        )
    started = time.perf_counter()
    measured = test_measurements(args, validation_names)
    records: list[Record] = []
    for name, rows in measured.items():
        original = rows[("none", 0)]
        for kind, (category, _) in evaluation.DEGRADATIONS.items():
            for level in evaluation.LEVELS:
                m = rows[(kind, level)]
                for question_kind, question, with_ref, expected in questions(
                    name, kind, category, level
                ):
                    answer = answer_from_measurements(
                        question, m, original if with_ref else None, thresholds
                    )
                    records.append(
                        (question_kind, kind, level, expected, answer, asked_category(question))
                    )
    print_mcq(
        records,
        evaluation,
        f"DEV-VAL (FIT photos), test generator, thresholds from "
        f"DEV-CAL: {len(validation_names)} photos",
        time.perf_counter() - started,
        details=True,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("livec", type=Path, help="folder with images/ and mos.csv")
    parser.add_argument("--weights-dir", type=Path, default=None)
    parser.add_argument(
        "--fit",
        action="store_true",
        help="recalibrate severity and refit the opinion on FIT photos only, "
        "writing the shipped parameters",
    )
    parser.add_argument(
        "--calibration-images",
        type=int,
        default=None,
        help="FIT photos used for severity calibration (default: all FIT)",
    )
    parser.add_argument(
        "--scoring-images",
        type=int,
        default=None,
        help="HELD-OUT photos scored (default: all HELD-OUT)",
    )
    parser.add_argument(
        "--mcq-images",
        type=int,
        default=6,
        help="HELD-OUT photos degraded for the questions (default 6; each "
        "gives 8 kinds x 4 levels x 5 questions, 40-80 s on 2 cores)",
    )
    parser.add_argument(
        "--in-sample-mcq",
        type=int,
        default=0,
        help="also ask the questions on this many FIT photos degraded by the "
        "calibration generator (an in-sample figure, for comparison)",
    )
    parser.add_argument(
        "--unseen",
        action="store_true",
        help="the folder is photos no fitting or calibration read (such as "
        "livec-extra for the severity models): report on all of them",
    )
    parser.add_argument(
        "--dev",
        action="store_true",
        help="development on FIT alone: calibrate on part of FIT, report the "
        "test generator's questions on the rest (no HELD-OUT photo is "
        "read, nothing is written)",
    )
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--skip-scoring", action="store_true")
    parser.add_argument("--skip-mcq", action="store_true")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(tempfile.gettempdir()) / "agentic-iqa-agent-quality",
        help="tool scores and calibration measurements are kept here",
    )
    args = parser.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    registry = ToolRegistry(
        ToolSettings(
            device="cpu",
            weights_dir=args.weights_dir,
            tool_cache=f"sqlite:///{args.cache / 'tool-scores.sqlite3'}",
        )
    )
    mos = read_mos(args.livec)
    if args.unseen:  # a folder no fitting or calibration ever read: every photo is held out
        if args.fit or args.dev:
            sys.exit(
                "--unseen is for a report on photos nothing was fitted on: not with --fit or --dev"
            )
        fit_names, held_names = [], sorted(mos)
        print(f"unseen folder: all {len(held_names)} photos are HELD-OUT")
    else:
        fit_names, held_names = split(sorted(mos))
        print(f"split: {len(fit_names)} FIT / {len(held_names)} HELD-OUT photos ({SPLIT_RULE})")
    if args.dev:
        dev_report(args, fit_names)
        return
    if args.fit:
        fit_all(args, registry, mos, fit_names, held_names)
        # The freshly written files are what the report must use.
        from agentic_iqa.vlm.builtin import opinion, severity

        opinion.default_models.cache_clear()
        severity.default_thresholds.cache_clear()
    metadata = (
        json.loads(THRESHOLDS_FILE.read_text())["metadata"] if THRESHOLDS_FILE.is_file() else {}
    )
    if metadata.get("split_rule") != SPLIT_RULE and not args.unseen:
        sys.exit("the shipped severity model was not calibrated with this split: run with --fit")
    agents = make_agents(registry)
    print("\nREPORT: HELD-OUT photos only (never used to fit or calibrate)")
    if not args.skip_scoring:
        if not args.unseen:
            print(
                "note: the shipped opinion (opinion.json) was fitted on all 250 dev photos, "
                "so on them this scoring figure is in-sample; --unseen on livec-extra is not"
            )
        scoring_report(args, agents, mos, spread_subset(held_names, args.scoring_images, "scoring"))
    if not args.skip_mcq:
        mcq_names = spread_subset(held_names, args.mcq_images, "mcq")
        mcq_report(
            args,
            agents,
            mcq_names,
            evaluation,
            "HELD-OUT photos, test generator (agentic_iqa.fitting.evaluation_degradations)",
        )
        if args.in_sample_mcq:
            mcq_report(
                args,
                agents,
                spread_subset(fit_names, args.in_sample_mcq, "mcq"),
                synthetic,
                "IN-SAMPLE: FIT photos, calibration generator (agentic_iqa.fitting.degradations)",
            )


if __name__ == "__main__":
    main()
