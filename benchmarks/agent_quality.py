"""How well the builtin agent scores real photos, and answers questions about degraded ones.

Part 1, scoring: "Rate the quality of this image." on every LIVE-C dev photo; SRCC and PLCC
against MOS of the agent's fused score, next to each offline tool alone (a bare score from the
same registry).  The builtin's opinion model (agentic_iqa/vlm/builtin/opinion.py) is fitted by
k-fold cross-validation: every photo is scored by a model that never saw it, so the agent's
figure is one for unseen photos.  ``--fit`` then refits it on all photos and writes the shipped
weights.

Part 2, multiple choice: photos degraded with agentic_iqa.synthetic (7 kinds x 4 levels),
asked "which distortion?" (6 options) and "how severe?" (5 options); accuracy per question type.

    python benchmarks/agent_quality.py ../shared/data/livec-dev \
        --weights-dir ../shared/data/pyiqa-weights [--fit] [--mcq-images 20]
"""

from __future__ import annotations

import argparse
import csv
import random
import tempfile
import time
from pathlib import Path

from PIL import Image
from scipy.stats import pearsonr, spearmanr

from agentic_iqa.pipeline import Agents, run_inprocess
from agentic_iqa.synthetic import DEGRADATIONS, SEVERITY_OF_LEVEL, degrade
from agentic_iqa.vlm.builtin import BuiltinClient
from agentic_iqa.vlm.builtin.opinion import PRIOR, TOOL_MEAN, WEIGHTS_FILE
from agentic_iqa.vlm.builtin.opinion import fit as fit_opinion
from agentic_iqa.vlm.builtin.vision import features as image_features
from iqa_tools import ToolRegistry, ToolSettings

TOOLS = ("BRISQUE", "NIQE", "PIQE")
QUERY = "Rate the quality of this image."
TYPE_QUESTION = ("Which distortion is most severe in this image? A. Blur B. Noise "
                 "C. JPEG compression D. Brightness change E. Low contrast F. Colour distortion")
TYPE_ANSWER = {"Blurs": "A", "Noise": "B", "Compression": "C", "Brightness change": "D",
               "Contrast": "E", "Color distortions": "F"}
SEVERITY_QUESTION = ("How severe is the {word} in this image? A. none B. slight C. moderate "
                     "D. severe E. extreme")
WORDS = {"Blurs": "blur", "Noise": "noise", "Compression": "JPEG compression",
         "Brightness change": "brightness change", "Contrast": "contrast",
         "Color distortions": "colour distortion"}


def correlations(predicted: list[float], mos: list[float]) -> tuple[float, float]:
    return float(spearmanr(predicted, mos).statistic), float(pearsonr(predicted, mos).statistic)


def read_mos(folder: Path) -> dict[str, float]:
    with (folder / "mos.csv").open() as handle:
        return {row["image"]: float(row["mos"]) for row in csv.DictReader(handle)}


def scoring(args: argparse.Namespace, agents: Agents) -> None:
    mos = read_mos(args.livec)
    names = sorted(mos)
    paths = {name: args.livec / "images" / name for name in names}
    target = {name: 1.0 + 4.0 * mos[name] / 100.0 for name in names}

    started = time.perf_counter()
    tools: dict[str, dict[str, float]] = {name: {} for name in names}
    features: dict[str, dict[str, float]] = {}
    for name in names:
        for tool in TOOLS:
            if agents.registry.availability(tool).ok:
                result = agents.registry.execute_tool(tool, paths[name], allow_fallback=False)
                # lower-is-better tools are negated so every correlation is positive-is-good
                tools[name][tool] = -result.raw_score if result.lower_is_better \
                    else result.raw_score
        features[name] = image_features(paths[name])
    print(f"tool scores and image features for {len(names)} photos in "
          f"{time.perf_counter() - started:.0f}s")

    # The agent's tool mean is what its own pipeline runs; record it with a first pass.
    prior = Agents(planner=agents.planner, executor=agents.executor,
                   summarizer=BuiltinClient(opinion=PRIOR), registry=agents.registry)
    tool_mean: dict[str, float | None] = {}
    for name in names:
        state = run_inprocess(QUERY, str(paths[name]), agents=prior)
        scores = [log.normalized_score for log in state["executor_evidence"].tool_logs
                  if not log.error or log.fallback]
        tool_mean[name] = sum(scores) / len(scores) if scores else None

    def rows(subset: list[str]) -> list[dict[str, float]]:
        return [{**features[n], **({TOOL_MEAN: tool_mean[n]} if tool_mean[n] is not None
                                   else {})} for n in subset]

    # k-fold cross-validation: every photo is scored by a model fitted without it.
    shuffled = names[:]
    random.Random(args.seed).shuffle(shuffled)
    agent_score: dict[str, float] = {}
    started = time.perf_counter()
    for fold in range(args.folds):
        held = shuffled[fold::args.folds]
        train = [n for n in shuffled if n not in set(held)]
        model = fit_opinion(rows(train), [target[n] for n in train], ridge=args.ridge)
        fold_agents = Agents(planner=agents.planner, executor=agents.executor,
                             summarizer=BuiltinClient(opinion=model), registry=agents.registry)
        for name in held:
            state = run_inprocess(QUERY, str(paths[name]), agents=fold_agents)
            agent_score[name] = state["summarizer_result"].quality_score
    per_run = (time.perf_counter() - started) / len(names)
    print(f"agent runs: {per_run * 1000:.0f} ms per photo (tool scores cached), "
          f"{args.folds}-fold cross-validation\n")

    columns = {"agent (CV)": agent_score}
    for tool in TOOLS:
        if tools[names[0]].get(tool) is not None:
            columns[tool] = {n: tools[n][tool] for n in names}
    print(f"{'':<12}{'SRCC':>8}{'PLCC':>8}   on all {len(names)} LIVE-C dev photos")
    for column, values in columns.items():
        srcc, plcc = correlations([values[n] for n in names], [mos[n] for n in names])
        print(f"{column:<12}{srcc:>8.3f}{plcc:>8.3f}")

    if args.fit:
        model = fit_opinion(rows(names), [target[n] for n in names], ridge=args.ridge,
                            metadata={"photos": len(names), "ridge": args.ridge,
                                      "target": "LIVE-C dev MOS rescaled to 1 + 4 * mos / 100",
                                      "fitted_by": "benchmarks/agent_quality.py --fit"})
        WEIGHTS_FILE.write_text(model.to_json())
        print(f"\nopinion model fitted on all {len(names)} photos -> {WEIGHTS_FILE}")


def multiple_choice(args: argparse.Namespace, agents: Agents) -> None:
    images = sorted((args.livec / "images").iterdir())[-args.mcq_images:]
    workdir = Path(tempfile.mkdtemp(prefix="iqa-mcq-"))
    correct = {"type": 0, "severity": 0}
    asked = {"type": 0, "severity": 0}
    for path in images:
        original = Image.open(path).convert("RGB")
        for kind, (category, _) in DEGRADATIONS.items():
            for level in (1, 2, 3, 4):
                copy = workdir / f"{path.stem}_{kind}{level}.png"
                degrade(original, kind, level).save(copy)
                answer = run_inprocess(TYPE_QUESTION, str(copy), agents=agents)[
                    "summarizer_result"].final_answer
                asked["type"] += 1
                correct["type"] += answer == TYPE_ANSWER[category]
                question = SEVERITY_QUESTION.format(word=WORDS[category])
                answer = run_inprocess(question, str(copy), agents=agents)[
                    "summarizer_result"].final_answer
                expected = "ABCDE"[list(SEVERITY_OF_LEVEL.values()).index(
                    SEVERITY_OF_LEVEL[level])]
                asked["severity"] += 1
                correct["severity"] += answer == expected
    print(f"\nmultiple choice on {len(images)} photos x {len(DEGRADATIONS)} kinds x 4 levels "
          "(photos not used to set the severity thresholds):")
    for kind in asked:
        print(f"  {kind:<9} accuracy {correct[kind] / asked[kind]:.3f} "
              f"({correct[kind]}/{asked[kind]}; chance {1 / (6 if kind == 'type' else 5):.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("livec", type=Path, help="folder with images/ and mos.csv")
    parser.add_argument("--weights-dir", type=Path, default=None)
    parser.add_argument("--fit", action="store_true",
                        help="refit the shipped builtin opinion model on all photos")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--ridge", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--mcq-images", type=int, default=20)
    parser.add_argument("--skip-mcq", action="store_true")
    args = parser.parse_args()
    registry = ToolRegistry(ToolSettings(device="cpu", weights_dir=args.weights_dir,
                                         tool_cache="memory"))
    client = BuiltinClient()
    agents = Agents(planner=client, executor=client, summarizer=client, registry=registry)
    scoring(args, agents)
    if not args.skip_mcq:
        multiple_choice(args, agents)


if __name__ == "__main__":
    main()
