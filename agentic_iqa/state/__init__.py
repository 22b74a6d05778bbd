"""Define the state of one assessment run, and the models that travel in it.

Planner, Executor and Summarizer talk only through these models, and a run's state crosses
process boundaries (Celery tasks, the database) as JSON.  So everything here is plain data:
validated on the way in (a VLM's JSON is untrusted input), written to JSON without loss (the NaN
score of a failed tool included) and read back into the same models.  The package is pure: it
imports neither torch nor Celery nor SQL, only the tool metadata, which is a JSON file.

- :mod:`.fields`: the field types and spellings every model shares;
- :mod:`.plan`: the Planner's input, plan and errors;
- :mod:`.executor`: the Executor's evidence and tool logs;
- :mod:`.summarizer`: the model's reply and the pipeline's answer;
- :mod:`.run`: the run's state, how updates merge, and its JSON round trip.

The paper's prompts spell some keys differently from the spec ("Explict", "tool_execute"); those
spellings are accepted on input and the spec's names are always written.
"""

from .executor import DistortionAnalysis, ExecutorOutput, ToolExecutionLog
from .fields import (
    DEFAULT_MAX_REPLAN_ITERATIONS,
    MAX_REPLAN_HISTORY,
    PROBABILITY_SUM_TOLERANCE,
    STORED,
    Distortion,
    DistortionKey,
    ObjectName,
    Probability,
    Score,
    Severity,
    Text,
    ToolName,
    UtcDatetime,
)
from .plan import IMAGE_EXTENSIONS, PlanControlFlags, PlannerError, PlannerInput, PlannerOutput
from .run import (
    AgenticIQAState,
    ReplanEntry,
    initial_state,
    merge_state,
    record_replan,
    state_from_json,
    state_to_json,
)
from .summarizer import NO_REASONING, PIPELINE_RESULT_FIELDS, SummarizerOutput, SummarizerReply

__all__ = [
    "DEFAULT_MAX_REPLAN_ITERATIONS",
    "IMAGE_EXTENSIONS",
    "MAX_REPLAN_HISTORY",
    "NO_REASONING",
    "PIPELINE_RESULT_FIELDS",
    "PROBABILITY_SUM_TOLERANCE",
    "STORED",
    "AgenticIQAState",
    "Distortion",
    "DistortionAnalysis",
    "DistortionKey",
    "ExecutorOutput",
    "ObjectName",
    "PlanControlFlags",
    "PlannerError",
    "PlannerInput",
    "PlannerOutput",
    "Probability",
    "ReplanEntry",
    "Score",
    "Severity",
    "SummarizerOutput",
    "SummarizerReply",
    "Text",
    "ToolExecutionLog",
    "ToolName",
    "UtcDatetime",
    "initial_state",
    "merge_state",
    "record_replan",
    "state_from_json",
    "state_to_json",
]
