"""One run of the agent as a sequence of steps, decided from the state alone.

:func:`next_step` is pure: from the plan's flags, the steps already done in this iteration and
the replan counters it names what runs next.  :func:`run_step` runs one step and returns the
state update.  The in-process runner loops over both; the Celery pipeline (workers/) persists the
state between the same steps, so both paths produce the same answer.

The plan step first checks the inputs: :class:`~agentic_iqa.state.PlannerInput` (a non-empty
query, existing image files with image extensions) on every plan, then :func:`validate_inputs`
(the tools can read them) on the first; bad inputs end the run as failed, with the reason,
before any model is asked anything and without replans.  Both runners (in-process here, stored
in :mod:`.service`) go through the same plan step.

A replan keeps the previous plan and its evidence until its new plan is made; when that plan
cannot be made (no valid reply, transient errors outlasting every retry) the replan is recorded
as failed and the summarizer answers with the previous evidence, told so
(:func:`replan_failed`): a run that has evidence never ends without the summarizer's answer.

In one process a :class:`~agentic_iqa.vlm.base.TransientVLMError` (timeout, 429, 5xx outlasting
the SDK's own retries) is retried with exponential backoff and jitter (:data:`TRANSIENT_RETRY`)
before it fails the run; the distributed pipeline has Celery's retries instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from iqa_tools import ToolRegistry
from iqa_tools.errors import InputError, ToolError
from iqa_tools.images import LoadedImage, check_min_size, probe_image

from .agents import executor, summarizer
from .agents.planner import PlanningFailed, make_plan, no_plan
from .agents.team import Agents, default_agents
from .state import (
    DEFAULT_MAX_REPLAN_ITERATIONS,
    AgenticIQAState,
    ExecutorOutput,
    PlannerInput,
    PlannerOutput,
    ReplanEntry,
    initial_state,
    merge_state,
    record_replan,
)
from .vlm.base import TransientVLMError, VLMError

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

T = TypeVar("T")

PLAN = "plan"
DETECT = "distortion_detection"
ANALYSE = "distortion_analysis"
SELECT = "tool_selection"
EXECUTE = "tool_execution"
SUMMARIZE = "summarize"
REPLAN = "replan"
STEPS = (PLAN, DETECT, ANALYSE, SELECT, EXECUTE, SUMMARIZE, REPLAN)
#: Steps that run IQA tools, and so belong on the tool (GPU) queue.
TOOL_STEPS = frozenset({EXECUTE})


def next_step(state: AgenticIQAState) -> str | None:
    """Return the step to run next, or None when the run is finished (answered or failed)."""
    if state.get("error"):
        return None  # planning failed, or a step failed for good
    if state.get("metric_tools"):  # a metric job's run: its tools, then done; no VLM at all
        return None if EXECUTE in state.get("steps_done", []) else EXECUTE
    if "plan" not in state or replanning(state):
        return PLAN
    done = state.get("steps_done", [])
    for step in _executor_steps(state["plan"]):
        if step not in done:
            return step
    if SUMMARIZE not in done:
        return SUMMARIZE
    result = state.get("summarizer_result")
    limit = state.get("max_replan_iterations", DEFAULT_MAX_REPLAN_ITERATIONS)
    if (
        result is not None
        and result.need_replan
        and state.get("iteration_count", 0) < limit
        and failed_replan(state) is None
    ):
        return REPLAN
    return None


def _executor_steps(plan: PlannerOutput) -> list[str]:
    """Return the executor subtasks ``plan`` runs, in order."""
    flags = plan.plan
    wanted = (
        # Distortions the query names are the ones looked at: never detected and replaced.
        (DETECT, flags.distortion_detection and not plan.distortions),
        (ANALYSE, flags.distortion_analysis),
        (SELECT, flags.tool_selection and not plan.required_tool),
        (EXECUTE, flags.tool_execution),
    )
    return [step for step, on in wanted if on]


def replanning(state: AgenticIQAState) -> bool:
    """Tell whether a replan was made and its new plan is yet to be made: until it is, the state
    keeps the previous plan and its evidence, for the summarizer should the new plan fail."""
    return (
        state.get("iteration_count", 0) > 0
        and "plan" in state
        and PLAN not in state.get("steps_done", [])
    )


def failed_replan(state: AgenticIQAState) -> ReplanEntry | None:
    """Return the replan of this iteration whose plan could not be made, if it failed."""
    history = state.get("replan_history", [])
    last = history[-1] if history else None
    if last is None or last.failure is None or last.iteration != state.get("iteration_count"):
        return None
    return last


def replan_failed(state: AgenticIQAState, failure: str) -> dict[str, Any]:
    """Return the update when a replan's plan cannot be made: the previous plan and its evidence
    stay (the executor's steps count as done), the failure is recorded on the replan, and the
    summarizer answers with what there is.  A run with evidence never ends unanswered."""
    history = list(state.get("replan_history", []))
    history[-1] = history[-1].model_copy(update={"failure": failure})
    log.warning(
        "replan %d (%s) failed, the summarizer answers with the previous plan's evidence: %s",
        history[-1].iteration,
        history[-1].reason,
        failure,
    )
    return {
        "replan_history": history,
        "error": None,
        "steps_done": [PLAN, *_executor_steps(state["plan"])],
    }


@dataclass(frozen=True)
class TransientRetry:
    """How one process retries a step after a transient VLM error: ``attempts`` in all, waits
    growing from ``initial`` seconds (doubling, at most ``maximum``) plus up to ``jitter``
    random seconds, so runs sharing a rate-limited server do not retry in step.  A server's
    ``Retry-After`` is honoured when longer (still capped at ``maximum``)."""

    attempts: int = 4
    initial: float = 0.5
    maximum: float = 8.0
    jitter: float = 0.5

    def call(self, what: str, function: Callable[[], T]) -> T:
        """Call ``function()``, retried on :class:`TransientVLMError`; the last error propagates."""
        backoff = wait_exponential(multiplier=self.initial, max=self.maximum) + wait_random(
            0, self.jitter
        )

        def wait(state: RetryCallState) -> float:
            error = state.outcome.exception() if state.outcome is not None else None
            asked = getattr(error, "retry_after", None) or 0.0
            return min(self.maximum, max(backoff(state), asked))

        def before_sleep(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome is not None else None
            log.warning(
                "%s: transient VLM error (attempt %d of %d), retrying: %s",
                what,
                state.attempt_number,
                self.attempts,
                error,
            )

        retrying = Retrying(
            retry=retry_if_exception_type(TransientVLMError),
            stop=stop_after_attempt(self.attempts),
            wait=wait,
            before_sleep=before_sleep,
            reraise=True,
        )
        return retrying(function)


#: The default: 4 attempts, waits of about 0.5, 1 and 2 s (+ jitter): a few seconds in all.
TRANSIENT_RETRY = TransientRetry()


#: Executor subtasks that ask a VLM: when their transient errors outlast the retries they are
#: given up (their evidence null, the run goes on), as the spec says of a failed subtask.
ABANDONABLE = frozenset({DETECT, ANALYSE, SELECT})


def abandoned(step: str, state: AgenticIQAState, reason: str) -> dict[str, Any] | None:
    """Return the update that gives up ``step`` after its transient errors outlasted every retry:
    its evidence stays null and the reason is kept in ``step_errors``; None for a step the run
    cannot go on without (plan, summarize), which then fails the run."""
    if step == PLAN and replanning(state):
        return replan_failed(state, reason)
    if step not in ABANDONABLE or "plan" not in state:
        return None
    key = f"{step}#{state.get('iteration_count', 0)}"
    log.warning("%s given up, its evidence stays empty: %s", key, reason)
    return {
        "steps_done": _done(state, step),
        "executor_evidence": ExecutorOutput(),
        "step_errors": {**state.get("step_errors", {}), key: reason},
    }


def check_planner_input(
    query: str, image_path: str, reference_path: str | None, replan_reason: str | None = None
) -> PlannerInput:
    """Return the run's inputs as the spec's :class:`PlannerInput`; a :class:`ValueError` saying
    what is wrong (empty query, missing file, not an image) when they are not valid."""
    try:
        return PlannerInput(
            query=query,
            image_path=image_path,
            reference_path=reference_path,
            prior_context={"replan_reason": replan_reason} if replan_reason else None,
        )
    except ValidationError as invalid:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc'])}: "
            f"{str(error['msg']).removeprefix('Value error, ')}"
            for error in invalid.errors()
        )
        raise ValueError(f"invalid input: {problems}") from None


def validate_inputs(image_path: str, reference_path: str | None = None) -> None:
    """Raise a :class:`ToolError` saying why, when the tools could not measure these inputs.

    Both files are decoded in full (a truncated file fails here, not as "Unable to determine"
    after every step), must be at least :data:`iqa_tools.images.MIN_IMAGE_SIDE` pixels a side,
    and a reference must have the image's size: full-reference tools never resize.
    """
    size = probe_image(image_path)
    check_min_size(image_path, size)
    if reference_path is None:
        return
    reference_size = probe_image(reference_path)
    check_min_size(reference_path, reference_size)
    if reference_size != size:
        raise InputError(
            f"the reference {reference_path!r} is {reference_size[0]}x{reference_size[1]} "
            f"pixels but the image {image_path!r} is {size[0]}x{size[1]}; full-reference tools "
            "compare pixel by pixel and never resize: give a reference of the same size"
        )


def _evidence(state: AgenticIQAState) -> ExecutorOutput:
    return state.get("executor_evidence") or ExecutorOutput()


def _done(state: AgenticIQAState, step: str) -> list[str]:
    return [*state.get("steps_done", []), step]


def run_step(step: str, state: AgenticIQAState, agents: Agents) -> dict[str, Any]:
    """Run one step on ``state`` and return its update (merge it with ``merge_state``)."""
    query, image = state["query"], state["image_path"]
    reference = state.get("reference_path")
    if state.get("metric_tools"):
        return _run_metrics(step, state, agents)
    if step == PLAN:
        history = state.get("replan_history", [])
        reason = history[-1].reason if history else None
        try:
            check_planner_input(query, image, reference, reason)
        except ValueError as bad:
            return replan_failed(state, str(bad)) if replanning(state) else {"error": str(bad)}
        if not history:  # a replan sees the same files: decoded once, on the first plan
            try:
                validate_inputs(image, reference)
            except ToolError as bad:
                if getattr(bad, "stops_job", False):  # every item would meet it: the job stops
                    raise
                return {"error": str(bad)}
        if state.get("mode") == "vlm":
            return {
                "plan": no_plan(query, reference is not None),
                "error": None,
                "steps_done": [PLAN],
                "executor_evidence": ExecutorOutput(),
            }
        tool_names = [spec.name for spec in agents.registry.catalog]
        try:
            plan = make_plan(agents.planner, query, image, reference, tool_names, reason)
        except PlanningFailed as failed:
            if replanning(state):
                return replan_failed(state, failed.error.message)
            return {"error": failed.error.model_dump_json()}
        # A new plan gathers its own evidence: the previous plan's is dropped.
        return {
            "plan": plan,
            "error": None,
            "steps_done": [PLAN],
            "executor_evidence": None if replanning(state) else ExecutorOutput(),
        }
    if step == REPLAN:
        # The plan and its evidence stay until the new plan is made (see replan_failed).
        reason = state["summarizer_result"].replan_reason or "No reason provided"
        replanned = record_replan(state, reason)
        return {
            "iteration_count": replanned["iteration_count"],
            "replan_history": replanned["replan_history"],
            "summarizer_result": None,
            "steps_done": [],
        }

    plan = state["plan"]
    evidence = _evidence(state)
    distortion_set = executor.distortion_set_for(plan, evidence.distortion_set)
    update: dict[str, Any] = {"steps_done": _done(state, step)}
    # What each subtask left out of the model's reply or put in instead, kept with the evidence.
    notes: list[str] = []
    if step == DETECT:
        found = executor.run_subtask(
            step,
            lambda: executor.detect_distortions(
                agents.executor, query, image, reference, plan, notes=notes
            ),
        )
        update["executor_evidence"] = ExecutorOutput(distortion_set=found, notes=notes)
    elif step == ANALYSE:
        found = executor.run_subtask(
            step,
            lambda: executor.analyse_distortions(
                agents.executor, query, image, reference, distortion_set, notes=notes
            ),
        )
        update["executor_evidence"] = ExecutorOutput(distortion_analysis=found, notes=notes)
    elif step == SELECT:
        found = executor.run_subtask(
            step,
            lambda: executor.select_tools(
                agents.executor,
                agents.registry,
                query,
                distortion_set,
                plan.reference_mode,
                excluded=plan.excluded_tools,
                notes=notes,
            ),
        )
        # What selection could not offer here, for the step that runs the tools (elsewhere?).
        unavailable = executor.unavailable_chain_tools(agents.registry, plan.excluded_tools)
        update["executor_evidence"] = ExecutorOutput(
            selected_tools=found, notes=notes, unavailable_tools=unavailable or None
        )
    elif step == EXECUTE:
        selected = executor.selection_for(plan, distortion_set, evidence.selected_tools)
        image_data, reference_data = executor.load_inputs(image, reference)
        # A tool the query named is run as named; the agent's own choice says what stood in.
        outcome = executor.run_subtask(
            step,
            lambda: executor.execute_tools(
                agents.registry,
                image_data,
                reference_data,
                selected,
                query,
                notes=notes,
                own_choice=not plan.required_tool,
                excluded=plan.excluded_tools,
                unavailable=evidence.unavailable_tools,
            ),
        )
        scores, logs = outcome if outcome is not None else ({}, [])
        update["executor_evidence"] = ExecutorOutput(
            quality_scores=scores or None, tool_logs=logs, notes=notes
        )
    elif step == SUMMARIZE:
        limit = state.get("max_replan_iterations", DEFAULT_MAX_REPLAN_ITERATIONS)
        update["summarizer_result"] = summarizer.summarize(
            agents.summarizer,
            query,
            image,
            reference,
            plan,
            evidence,
            can_replan=state.get("iteration_count", 0) < limit,
            failed_replan=failed_replan(state),
        )
    else:
        raise ValueError(f"unknown step {step!r}; steps: {STEPS}")
    return update


def _planned_calls(state: AgenticIQAState) -> list[executor.ToolCall]:
    """Return the calls the run's tool step makes, in order (a region's on its crop)."""
    if state.get("metric_tools"):
        return [
            executor.ToolCall(executor.METRIC_OBJECT, executor.metric_distortion(tool), tool)
            for tool in state["metric_tools"]
        ]
    plan = state["plan"]
    evidence = _evidence(state)
    distortion_set = executor.distortion_set_for(plan, evidence.distortion_set)
    selected = executor.selection_for(plan, distortion_set, evidence.selected_tools)
    return executor.tool_calls(selected, state["query"])


def planned_tool_calls(
    state: AgenticIQAState, registry: ToolRegistry
) -> list[tuple[str, str, str | None]]:
    """Return the (tool, image, reference) calls the run's next step will make, when it is the tool
    step: what a tool worker can score ahead for several runs in one batch.  Fallbacks and a
    region's crop are not foreseen (they run one by one when needed)."""
    if next_step(state) != EXECUTE:
        return []
    image, reference = state["image_path"], state.get("reference_path")
    calls = []
    for tool in dict.fromkeys(call.tool for call in _planned_calls(state) if call.region is None):
        try:
            full_reference = registry.get(tool).is_full_reference
        except ToolError:
            continue  # an unknown tool: the step itself reports it
        if full_reference and reference is None:
            continue
        calls.append((tool, image, reference if full_reference else None))
    return calls


def tool_step_cached(state: AgenticIQAState, registry: ToolRegistry) -> bool:
    """Tell whether the run's upcoming tool step only reads the score cache: every tool it calls has
    a cached score for these very files.  Such a step needs no tool (GPU) worker, so any worker
    may run it where it is, saving two broker hops.  Anything unforeseen (an unknown tool, an FR
    tool without a reference, an unreadable file) says no: the tool worker handles it.  So does
    an image in an object store: telling would download it to a host that has no other use for
    its bytes (the cache is keyed by the content), which costs more than the hops."""
    if next_step(state) != EXECUTE:
        return False
    from iqa_tools.storage import is_url

    if any(is_url(path) for path in (state["image_path"], state.get("reference_path") or "")):
        return False
    try:
        calls = _planned_calls(state)
        image, reference = executor.load_inputs(state["image_path"], state.get("reference_path"))
        for call in calls:
            full_reference = registry.get(call.tool).is_full_reference
            if full_reference and reference is None:
                return False
            target, ref = executor.call_images(call, image, reference)
            if registry.cached_score(call.tool, target, ref if full_reference else None) is None:
                return False
    except (ToolError, InputError):
        return False
    return bool(calls)


def _run_metrics(step: str, state: AgenticIQAState, agents: Agents) -> dict[str, Any]:
    """Return a metric job's one step: its inputs checked (no plan step does it here), then each
    named tool on the whole image.  The run fails only when every tool failed, with each one's
    reason: a tool that fails on some images still leaves the others' scores usable."""
    if step != EXECUTE:
        raise ValueError(f"a metric run has only the {EXECUTE!r} step, not {step!r}")
    tools = list(state["metric_tools"])
    image, reference = state["image_path"], state.get("reference_path")
    if not any(agents.registry.get(tool).is_full_reference for tool in tools):
        reference = None  # only full-reference tools read it: not decoded for nothing
    done = _done(state, step)
    try:  # decoded once here, and the tools reuse these pixels
        image_data, reference_data = executor.load_inputs(image, reference)
        # These very bytes were decoded and scored before when every score is cached: then
        # their sizes come from the headers (a re-run of a job decodes nothing).
        cached = _metrics_cached(agents.registry, tools, image_data, reference_data)
        image_size = image_data.header_size if cached else image_data.size
        check_min_size(image_data.path, image_size)
        if reference_data is not None:
            reference_size = reference_data.header_size if cached else reference_data.size
            check_min_size(reference_data.path, reference_size)
            if reference_size != image_size:
                raise InputError(
                    f"the reference {reference!r} is {reference_size[0]}x"
                    f"{reference_size[1]} pixels but the image {image!r} is "
                    f"{image_size[0]}x{image_size[1]}; full-reference tools never "
                    "resize: give a reference of the same size"
                )
    except ToolError as bad:
        if getattr(bad, "stops_job", False):  # a store refusing this worker's credential
            raise
        return {"error": str(bad), "steps_done": done}
    scores, logs = executor.run_metrics(agents.registry, image_data, reference_data, tools)
    update: dict[str, Any] = {
        "steps_done": done,
        "executor_evidence": ExecutorOutput(quality_scores=scores or None, tool_logs=logs),
    }
    if logs and all(entry.error is not None for entry in logs):
        update["error"] = "every tool failed: " + "; ".join(
            f"{entry.tool_name}: {entry.error}" for entry in logs
        )
    return update


def _metrics_cached(
    registry: ToolRegistry, tools: list[str], image: LoadedImage, reference: LoadedImage | None
) -> bool:
    """Tell whether every one of ``tools`` has a cached score for these files."""
    try:
        return all(
            registry.cached_score(
                tool, image, reference if registry.get(tool).is_full_reference else None
            )
            is not None
            for tool in tools
        )
    except ToolError:
        return False


def run_inprocess(
    query: str,
    image_path: str,
    reference_path: str | None = None,
    *,
    agents: Agents | None = None,
    max_replan_iterations: int = DEFAULT_MAX_REPLAN_ITERATIONS,
    on_step: Callable[[str, float], None] | None = None,
    retry: TransientRetry = TRANSIENT_RETRY,
) -> AgenticIQAState:
    """Run the whole agent in this process and return the final state.

    A step failing with a transient VLM error is retried per ``retry``; a VLM error that
    persists ends the run with ``error`` set, except in an executor subtask (given up) or a
    replan's plan (the replan fails and the summarizer answers with the previous evidence).
    """
    agents = agents or default_agents()
    state = initial_state(
        query,
        str(image_path),
        str(reference_path) if reference_path else None,
        max_replan_iterations=max_replan_iterations,
    )
    timings: dict[str, float] = {}
    while (step := next_step(state)) is not None:
        started = time.perf_counter()
        try:
            update = retry.call(step, partial(run_step, step, state, agents))
        except VLMError as exc:  # permanent, or transient after every retry
            given_up = (
                abandoned(step, state, f"{step} failed: {exc}")
                if isinstance(exc, TransientVLMError)
                else None
            )
            if given_up is None:  # a step the run cannot go without: the run ends
                log.error("run failed at %s: %s", step, exc)
                return merge_state(
                    state, {"error": f"{step} failed: {exc}", "step_seconds": timings}
                )
            update = given_up
        state = merge_state(state, update)
        elapsed = time.perf_counter() - started
        key = f"{step}#{state.get('iteration_count', 0)}" if step != REPLAN else step
        timings[key] = timings.get(key, 0.0) + elapsed
        if on_step is not None:
            on_step(step, elapsed)
    return merge_state(state, {"step_seconds": timings})
