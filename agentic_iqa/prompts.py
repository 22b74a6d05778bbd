"""Prompt templates.

The four executor templates are the specification's, verbatim (``executor-core.md``); they are
filled with ``str.replace`` on their ``{placeholders}`` because the templates themselves contain
JSON braces.  The planner and summarizer prompts are ours, written from the paper's rules.
"""

from __future__ import annotations

import json
from typing import Any

DISTORTION_DETECTION_SYSTEM = """You are an expert in distortion detection. Based on the user's query, identify all possible distortions need to be
focused on to properly address the user's intent.
Return a valid JSON object in the following format:
{
  "distortion_set": {
    "<object or Global>": ["<distortion_1>", "<distortion_2>", ...]
  }
}
Instructions:
1. Focus your analysis on query scope. Describe distortions for each individually.
2. Only include distortion types from the following valid categories: ["Blurs", "Color distortions", "Compression", "Noise", "Brightness change", "Sharpness", "Contrast"]"""  # noqa: E501

DISTORTION_DETECTION_USER = """User's query: {query}
The image: <image>"""

DISTORTION_ANALYSIS_SYSTEM = """You are a distortion analysis expert. Your task is to assess the severity and visual impact of various distortion
types for different regions of an image or the entire image.
The distortion information: {distortion_set}
Return a valid JSON object in the following format:
{
  "distortion_analysis": {
    "<object or Global>": [
      {
        "type": "<distortion>",
        "severity": "<none/slight/moderate/severe/extreme>",
        "explanation": "<brief visual explanation>"
      }
    ]
  }
}
Instructions:
1. Base your analysis on the listed distortion types and consider the user question.
2. Use "none" if a distortion is barely or not visible.
3. Keep explanations short and focused on visual quality. Focus solely on analyzing visual distortion effects."""  # noqa: E501

DISTORTION_ANALYSIS_USER = DISTORTION_DETECTION_USER

TOOL_SELECTION_SYSTEM = """You are a tool executor. Your task is to assign the most appropriate IQA tool to each visual distortion type,
based on the descriptions of the tools.
The distortion information: {distortion_set}.
The available tools: {tool_description}.
Return a valid JSON object in the following format:
{
  "selected_tools": {
    "<object or Global>": {
      "<distortion>": "<tool_name>"
    }
  }
}
Instructions:
For each distortion, choose the tool whose description suggests it performs best for that type of distortion."""  # noqa: E501

TOOL_SELECTION_USER = "User's query: {query}"

#: Added to the system prompt on a retry after output that was not valid JSON.
STRICT_JSON_SUFFIX = (
    "\n\nReturn ONLY valid JSON: no prose, no code fences, nothing after the object."
)

#: Added as well when the reply before was cut off at the token limit.
TRUNCATED_SUFFIX = (
    "\nYour previous reply was cut off at the length limit: keep every explanation to one "
    "short sentence."
)

PLANNER_SYSTEM = """You are the planner of an image quality assessment agent. Read the user's query
(and note whether a reference image is given) and return a JSON plan with exactly these keys:
{
  "query_type": "IQA" or "Other",
  "query_scope": ["<object or region named in the query>", ...] or "Global",
  "distortion_source": "Explicit" or "Inferred",
  "distortions": {"<object or Global>": ["<distortion>", ...]} or null,
  "reference_mode": "Full-Reference" or "No-Reference",
  "required_tool": "<tool name>" or null,
  "plan": {"distortion_detection": bool, "distortion_analysis": bool,
           "tool_selection": bool, "tool_execution": bool},
  "answer_mode": "scoring" or "explanation"
}
Rules:
1. query_type is "IQA" for questions about technical quality (noise, blur, lighting,
   sharpness, colour, contrast, compression, overall quality); "Other" for emotion, style,
   beauty or aesthetics.
2. query_scope lists the objects or regions the query names; "Global" only when it names none.
3. distortion_source is "Explicit" when the query names distortions (then list them in
   distortions, using only: Blurs, Color distortions, Compression, Noise, Brightness change,
   Sharpness, Contrast); otherwise "Inferred" and distortions is null.
4. reference_mode is "Full-Reference" exactly when a reference image is given.
5. required_tool is set only when the query names an IQA tool as a tool ("use NIQE", "the
   BRISQUE score"); an ordinary word that is also a tool's name ("what is unique about...")
   names no tool.
6. plan: all false for "Other". distortion_detection is false when distortions are explicit.
   distortion_analysis is true. Region and tool named: tool_selection false, tool_execution true.
   Region named, no tool: both false. Tool named, no region: tool_selection false,
   tool_execution true. Neither: both true.
7. answer_mode is "scoring" when the query asks for a rating or score of the image's quality
   (in any language) and gives no options to choose from; otherwise "explanation".
Return only the JSON object."""

PLANNER_USER = """User's query: {query}
Reference image given: {has_reference}
{replan_context}The image: <image>"""

SUMMARIZER_SYSTEM = """You are the summarizer of an image quality assessment agent. You receive the
user's query, the plan, and the evidence gathered: distortions with their severity and tool scores
on a 1 (bad) to 5 (excellent) scale. Answer the query from the evidence; look at the image yourself
when the evidence does not settle it. Tool scores are the whole image's (or a named region's crop):
no tool measures an object on its own, so judge objects from the image. If the evidence the plan
asked for is missing (for example no severity for a distortion, or no tool score at all), set
need_replan to true and say what is missing.
Return JSON: {"final_answer": "<option letter for multiple choice, else a short answer>",
"quality_reasoning": "<evidence-based explanation>", "need_replan": false,
"replan_reason": null}"""

SUMMARIZER_USER = """User's query: {query}
Plan: {plan}
Distortion analysis: {distortion_analysis}
Tool scores (1-5): {quality_scores}
The image: <image>"""

#: Appended to the summarizer's user prompt (both modes) when evidence the plan asked for is
#: missing and no new plan can supply it, or no replan is left: the model answers from the
#: image and the evidence there is, as the paper's summarizer does once the replans are used up.
SUMMARIZER_MISSING_EVIDENCE = """
Evidence the plan asked for is missing: {missing}. No more evidence can be gathered: answer
the query from the image and the evidence above."""

#: Appended to the summarizer's user prompt (both modes) when a replan was asked for but its
#: plan could not be made: the evidence is the previous plan's, and the model answers with it.
SUMMARIZER_REPLAN_FAILED = """
A new plan was asked for ({reason}) but could not be made: {failure}. The plan and evidence
above are the previous ones and no more can be gathered: answer the query from the image and
that evidence."""

#: Appended to the summarizer's user prompt when the executor left something out of the
#: evidence (a distortion not analysed, a tool replaced): the model knows what it is reading.
SUMMARIZER_EVIDENCE_NOTES = """
Notes on the evidence: {notes}"""

#: Appended to the summarizer's user prompt (both modes) when a tool that ran stood in for the
#: one the agent would have used (not installed here, a failure): the scores are the stand-in's.
#: The answer's reasoning says so whatever the model writes (``summarizer.with_stand_ins``).
SUMMARIZER_STAND_INS = """
Tools that stood in for others (the tool scores above are theirs): {stand_ins}"""

QUALITY_LEVELS_SYSTEM = """You are an image quality expert. Considering the evidence, rate the
overall quality of the image. Answer with a single letter:
A. Excellent
B. Good
C. Fair
D. Poor
E. Bad"""

QUALITY_LEVELS_USER = """User's query: {query}
Distortion analysis: {distortion_analysis}
Tool scores (1-5): {quality_scores}
The image: <image>"""

#: Answer letters of the five-level question and the level (5 = Excellent ... 1 = Bad).
QUALITY_LEVEL_OPTIONS: dict[str, int] = {"A": 5, "B": 4, "C": 3, "D": 2, "E": 1}
QUALITY_LEVEL_NAMES: dict[int, str] = {5: "Excellent", 4: "Good", 3: "Fair", 2: "Poor", 1: "Bad"}
#: The five-level question's options as a reader sees them: letter -> level name.
QUALITY_LEVEL_CHOICES: dict[str, str] = {
    letter: QUALITY_LEVEL_NAMES[level] for letter, level in QUALITY_LEVEL_OPTIONS.items()
}

#: Added to the system prompt on a retry after an answer with no readable option letter.
STRICT_OPTION_SUFFIX = (
    "\n\nAnswer with exactly one option letter ({letters}) and nothing else: no words, no "
    "explanation."
)

#: Added to the summarizer's system prompt on a retry when a multiple-choice answer named no
#: option.
STRICT_MCQ_SUFFIX = (
    "\n\nThe query is multiple choice: final_answer must be exactly one option letter "
    "({letters}), nothing else. Return ONLY valid JSON."
)

#: The follow-up request after a reply that commits to no option readably: the same model is
#: shown its own reply and asked which option it chose, or NONE.  No image is sent: it clarifies
#: what it wrote, it does not look again (:mod:`agentic_iqa.agents.followup`).
FOLLOW_UP_SYSTEM = """You answered a multiple-choice question about an image. Your reply is
quoted below. Which one option did your reply choose? Answer with exactly one option letter
({letters}), or NONE if your reply chose no single option. Write nothing else."""

FOLLOW_UP_USER = """Question: {query}
Options:
{options}

Your reply:
<<<
{reply}
>>>"""

#: The second request of scoring mode, for servers that return no log-probabilities: the
#: model states a probability per level (the same substitute the Anthropic backend uses).
QUALITY_PROBABILITIES_SYSTEM = """You are an image quality expert. Considering the evidence, how
likely is each overall quality level of the image?
A. Excellent
B. Good
C. Fair
D. Poor
E. Bad
Return JSON: {"option_probabilities": {"A": <p>, "B": <p>, "C": <p>, "D": <p>, "E": <p>}}, one
probability between 0 and 1 per option letter, together summing to 1."""

#: Added to the tool-selection system prompt when a reference image is given (the spec's
#: "prioritize FR tools"; the template itself stays verbatim).
FR_PREFERENCE_INSTRUCTION = (
    "\nA reference image is given: prefer full-reference (FR) tools, and choose a "
    "no-reference (NR) tool only when no FR tool suits the distortion."
)


def render(template: str, **values: Any) -> str:
    """Fill ``{name}`` placeholders, leaving every other brace (the JSON examples) alone."""
    text = template
    for name, value in values.items():
        if not isinstance(value, str):
            value = json.dumps(value, ensure_ascii=False, default=str)
        text = text.replace("{" + name + "}", value)
    return text
