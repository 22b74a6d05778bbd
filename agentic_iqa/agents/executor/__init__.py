"""Run the Executor: four subtasks gated by the plan's flags, each allowed to fail on its own.

Detection, analysis and selection ask the VLM with the specification's prompt templates;
execution runs the selected tools through :mod:`iqa_tools` and logs every call, labelled with
what it scored: tools cannot locate an object, so for objects they score the whole image
("Global"), and a region named by position is scored on its crop (:func:`tool_calls`).  Each
subtask keeps what is usable in a reply (evidence, not gates) and notes what it
dropped or replaced; a reply is asked again only when nothing in it is usable.  A subtask that
fails (no usable reply after three attempts, an exception) leaves its field ``None`` and the
next subtask works with what there is; only tool selection has a defined fallback (the generic
tools of the spec: QAlign for NR, TOPIQ_FR for FR), and tool failures fall back inside the
registry.

No tool stands in silently: a call whose tool another replaced (a failure, an FR tool without a
reference) logs the tool asked for and why it did not run, and so does a call of the agent's own
choice that a tool of the fallback chain would have made, had that tool been installed here
(:class:`Preference`: without BRISQUE's parameter file the example is measured with PIQE, and
its log names BRISQUE, the missing file and the command that fetches it).

- :mod:`.subtasks`: what every subtask shares (running one, its scope, its notes);
- :mod:`.analysis`: detection and analysis of distortions;
- :mod:`.selection`: a tool per distortion;
- :mod:`.execution`: running the tools, and a metric job's tools on the whole image.
"""

from .analysis import analyse_distortions, detect_distortions, distortion_set_for
from .execution import (
    METRIC_OBJECT,
    Preference,
    ToolCall,
    call_images,
    execute_tools,
    load_inputs,
    metric_distortion,
    run_metrics,
    tool_calls,
    unavailable_chain_tools,
    whole_image_note,
)
from .selection import select_tools, selection_for, tool_descriptions
from .subtasks import run_subtask

__all__ = [
    "METRIC_OBJECT",
    "Preference",
    "ToolCall",
    "analyse_distortions",
    "call_images",
    "detect_distortions",
    "distortion_set_for",
    "execute_tools",
    "load_inputs",
    "metric_distortion",
    "run_metrics",
    "run_subtask",
    "select_tools",
    "selection_for",
    "tool_calls",
    "tool_descriptions",
    "unavailable_chain_tools",
    "whole_image_note",
]
