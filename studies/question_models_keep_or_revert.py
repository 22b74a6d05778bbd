"""Do the question models go back with the opinion?  The builtin against itself before issue 12.

Issue 24: the severity and which-distortion answers judged by the rule the scoring follows,
compared with the builtin as it was at commit c20d270 on the same questions about photos
neither was fitted on.  It writes nothing in the repository.

The questions
    exactly those of ``agent_quality.py --unseen --skip-scoring --mcq-images 10`` on
    livec-extra: the photos ``spread_subset(all names, 10, "mcq")``, each degraded by the TEST
    generator (agentic_iqa.fitting.evaluation_degradations) in 8 kinds x 4 levels, with
    ``agent_quality.questions`` for each copy (yes/no twice, which distortion, which distortion
    with the reference, severity): 1600 questions.  Copies and references are written to a
    temporary folder, as ``mcq_report`` writes them.

The two builtins
    current  in this process, as ``mcq_report`` asks: ``run_inprocess(question, copy,
             reference)`` with ``agent_quality.make_agents`` and a CPU tool registry (its
             tool scores cached where agent_quality keeps them, by image SHA-256).
    c20d270  that commit's own ``run_inprocess`` with its BuiltinClient and a CPU registry,
             in a subprocess on a git worktree of that commit (made if absent), the question
             text passed verbatim and the reference for "which vs reference".  Its answers
             are cached under --cache by (question, SHA-256 of the copy and the reference).

Both are scored as ``mcq_report`` scores: the answer equals the expected letter.

Reported, per question kind (overall, yes/no, which, which vs reference, severity) and per
distortion kind (all five questions of each copy): each builtin's accuracy with a Wilson 95 %
interval; the paired difference current - c20d270 with a 95 % bootstrap interval resampling
PHOTOS (the 10 photos, each with all its questions; the honest unit, and wide with 10), and
with one resampling questions (paired, narrower, treats questions as independent); the
discordant pairs (+ current right only, - c20d270 right only).  Then accuracies per distortion
and question kind, and answers that are no option letter.

    python studies/question_models_keep_or_revert.py [--data-dir DIR] [--images 10]

DIR (livec-extra/ and pyiqa-weights/ in it) defaults to $AGENTIC_IQA_DATA_DIR, else
../shared/data beside the repository.

Runtime on 2 CPU cores: ~4 minutes for the current builtin and, run alongside it the first
time, ~5 minutes for c20d270; ~4 minutes afterwards.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from agentic_iqa.fitting import evaluation_degradations as generator
from iqa_tools import ToolRegistry, ToolSettings

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import agent_quality as aq  # noqa: E402  (the questions and their scoring, reused)
from opinion_selection import OLD_AGENTS, default_data_dir, old_worktree, sha256  # noqa: E402

OLD_COMMIT = "c20d270"

#: Runs inside the old worktree (cwd and PYTHONPATH there): one question a JSON line in and out.
OLD_ANSWERER = (
    OLD_AGENTS
    + r"""
for line in Path(sys.argv[3]).read_text().splitlines():
    job = json.loads(line)
    state = run_inprocess(job["question"], job["image"], job["reference"], agents=agents)
    result = state.get("summarizer_result")
    print(json.dumps({"key": job["key"], "answer": result.final_answer if result else "",
                      "error": state.get("error")}), flush=True)
"""
)


def build(livec: Path, names: list[str], workdir: Path) -> list[dict]:
    """Every question as mcq_report makes it, its copy and reference written under workdir."""
    rows = []
    for photo, kind, level, copy, reference, asked in aq.degraded_copies(
        livec, names, generator, workdir
    ):
        for question_kind, question, with_ref, expected in asked:
            ref = reference if with_ref else None
            key = hashlib.sha256(
                json.dumps([question, sha256(copy), sha256(ref) if ref else ""]).encode()
            ).hexdigest()
            rows.append(
                {
                    "photo": photo,
                    "qkind": question_kind,
                    "kind": kind,
                    "level": level,
                    "question": question,
                    "image": str(copy),
                    "reference": str(ref) if ref else None,
                    "expected": expected,
                    "key": key,
                }
            )
    return rows


def start_old(rows: list[dict], args: argparse.Namespace, cache: dict):
    """Starts c20d270 on the questions not in its cache; returns (process, jobs file) or None."""
    todo = {r["key"]: r for r in rows if r["key"] not in cache}
    if not todo:
        return None
    jobs = Path(tempfile.mkstemp(suffix=".jsonl")[1])
    jobs.write_text(
        "".join(
            json.dumps({k: r[k] for k in ("key", "question", "image", "reference")}) + "\n"
            for r in todo.values()
        )
    )
    process = subprocess.Popen(
        [sys.executable, "-c", OLD_ANSWERER, str(args.old_tree), str(args.weights_dir), str(jobs)],
        cwd=args.old_tree,
        env={**os.environ, "PYTHONPATH": str(args.old_tree)},
        stdout=subprocess.PIPE,
        text=True,
    )
    print(f"{OLD_COMMIT}: asking {len(todo)} questions in a subprocess")
    return process, jobs


def finish_old(started, cache: dict, cache_file: Path) -> None:
    if started is None:
        return
    process, jobs = started
    for count, line in enumerate(process.stdout, 1):
        row = json.loads(line)
        cache[row["key"]] = {"answer": row["answer"], "error": row["error"]}
        if count % 50 == 0:
            cache_file.write_text(json.dumps(cache))
    cache_file.write_text(json.dumps(cache))
    jobs.unlink()
    if process.wait() != 0:
        sys.exit(f"the {OLD_COMMIT} answering run failed")


def ci(values: np.ndarray) -> str:
    return f"[{np.percentile(values, 2.5):+.3f}, {np.percentile(values, 97.5):+.3f}]"


def report(rows: list[dict], photos: int, draws: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(photos, np.full(photos, 1 / photos), size=draws)  # photo draws
    groups = [("overall", lambda r: True)]
    groups += [(q, lambda r, q=q: r["qkind"] == q) for q in aq.QUESTION_KINDS]
    groups += [(k, lambda r, k=k: r["kind"] == k) for k in generator.DEGRADATIONS]
    print(
        f"\n{'':<20}{'n':>5}  {'current [Wilson 95%]':<24}{'c20d270 [Wilson 95%]':<24}"
        f"{'diff':>7} {'photo bootstrap':<18} {'question bootstrap':<18} {'+/-':>7}"
    )
    for label, chosen in groups:
        subset = [r for r in rows if chosen(r)]
        new = np.array([r["new_ok"] for r in subset], float)
        old = np.array([r["old_ok"] for r in subset], float)
        photo = np.array([r["photo"] for r in subset])
        per_new = np.bincount(photo, new, photos)
        per_old = np.bincount(photo, old, photos)
        per_n = np.bincount(photo, None, photos).astype(float)
        by_photos = (weights @ (per_new - per_old)) / (weights @ per_n)
        picks = rng.integers(0, len(subset), (draws, len(subset)))
        by_questions = (new - old)[picks].mean(axis=1)
        cells = []
        for ok in (new, old):
            low, high = aq.wilson(int(ok.sum()), len(ok))
            cells.append(f"{ok.mean():.3f} [{low:.3f}, {high:.3f}]")
        if label == "defocus":
            print()
        discordant = f"+{int((new > old).sum())}/-{int((new < old).sum())}"
        print(
            f"{label:<20}{len(subset):>5}  {cells[0]:<24}{cells[1]:<24}"
            f"{new.mean() - old.mean():>+7.3f} {ci(by_photos):<18} {ci(by_questions):<18} "
            f"{discordant:>7}"
        )
    print(f"\n{'current / c20d270':<20}" + "".join(f"{q:>20}" for q in aq.QUESTION_KINDS))
    for kind in generator.DEGRADATIONS:
        cells = []
        for q in aq.QUESTION_KINDS:
            subset = [r for r in rows if r["kind"] == kind and r["qkind"] == q]
            cells.append(
                f"{np.mean([r['new_ok'] for r in subset]):.3f} / "
                f"{np.mean([r['old_ok'] for r in subset]):.3f}"
            )
        print(f"{kind:<20}" + "".join(f"{c:>20}" for c in cells))
    print("\nanswers that are no option letter (per builtin and question kind)")
    for who in ("new", "old"):
        odd = Counter((r["qkind"], r[who]) for r in rows if r[who] not in tuple("ABCDEF"))
        errors = sum(bool(r.get("old_error")) for r in rows) if who == "old" else 0
        shown = ", ".join(f"{q}: {a!r} x{n}" for (q, a), n in sorted(odd.items())) or "none"
        print(
            f"  {'current' if who == 'new' else OLD_COMMIT:<8} {shown}"
            + (f"; runs ending in error: {errors}" if who == "old" else "")
        )
    print("\nseverity confusion (rows: true level 1-4; answered A-E), current | c20d270")
    for level in generator.LEVELS:
        counts = [
            Counter(r[w] for r in rows if r["qkind"] == "severity" and r["level"] == level)
            for w in ("new", "old")
        ]
        print(
            "  "
            + str(level)
            + "  "
            + " | ".join("".join(f"{c.get(x, 0):>4}" for x in "ABCDE") for c in counts)
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=default_data_dir())
    parser.add_argument(
        "--weights-dir", type=Path, default=None, help="default: <data-dir>/pyiqa-weights"
    )
    parser.add_argument("--images", type=int, default=10, help="livec-extra photos (default 10)")
    parser.add_argument("--old-tree", type=Path, default=Path(f"/tmp/old-{OLD_COMMIT}"))
    parser.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "agentic-iqa-questions-c20d270"
    )
    parser.add_argument(
        "--tool-cache",
        type=Path,
        help="the current builtin's tool scores "
        "(default: agent_quality's, /tmp/agentic-iqa-agent-quality)",
        default=Path(tempfile.gettempdir()) / "agentic-iqa-agent-quality" / "tool-scores.sqlite3",
    )
    parser.add_argument("--bootstrap", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    args.weights_dir = args.weights_dir or args.data_dir / "pyiqa-weights"
    args.old_tree = args.old_tree.resolve()
    livec = args.data_dir / "livec-extra"
    full = old_worktree(args.old_tree, OLD_COMMIT)
    args.cache.mkdir(parents=True, exist_ok=True)
    cache_file = args.cache / f"old-answers-{full[:12]}.json"
    cache = json.loads(cache_file.read_text()) if cache_file.is_file() else {}
    names = aq.spread_subset(sorted(aq.read_mos(livec)), args.images, "mcq")
    print(f"livec-extra photos: {', '.join(names)}")
    workdir = Path(tempfile.mkdtemp(prefix="iqa-c20d270-"))
    try:
        rows = build(livec, names, workdir)
        old_run = start_old(rows, args, cache)
        agents = aq.make_agents(
            ToolRegistry(
                ToolSettings(
                    device="cpu",
                    tool_cache=f"sqlite:///{args.tool_cache}",
                    weights_dir=args.weights_dir,
                )
            )
        )
        started = time.perf_counter()
        for row in rows:
            row["new"] = aq._answer(
                agents,
                row["question"],
                Path(row["image"]),
                Path(row["reference"]) if row["reference"] else None,
            )
        print(f"current builtin: {len(rows)} questions in {time.perf_counter() - started:.0f}s")
        finish_old(old_run, cache, cache_file)
        print(
            f"{OLD_COMMIT} builtin done after {time.perf_counter() - started:.0f}s "
            f"(answers cached in {cache_file})"
        )
    finally:
        shutil.rmtree(workdir)
    for row in rows:
        row["old"], row["old_error"] = cache[row["key"]]["answer"], cache[row["key"]]["error"]
        row["new_ok"], row["old_ok"] = row["new"] == row["expected"], row["old"] == row["expected"]
    print(
        f"\n{len(rows)} questions: {len(names)} livec-extra photos x "
        f"{len(generator.DEGRADATIONS)} kinds x {len(generator.LEVELS)} levels x 5; test "
        f"generator; difference intervals: {args.bootstrap} paired bootstrap draws"
    )
    report(rows, len(names), args.bootstrap, args.seed)


if __name__ == "__main__":
    main()
