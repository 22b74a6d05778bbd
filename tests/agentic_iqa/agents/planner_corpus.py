"""Planner replies written as hosted models write them, each with the plan a human derives from
the query by the paper's rules, for ``test_planner_corpus.py`` and ``benchmarks/planner_corpus.py``.

Styles: "gpt" (GPT-4o: bare JSON or a ```json fence, the prompt's keys), "claude" (a sentence
before the fence and reasons after it), "qwen" (Qwen2.5-VL: its own key spellings, the paper's
"Explict" and "tool_execute", lower-case values, lists where the prompt asks for objects).

The human plan (``want``) follows the paper's planner rules (``/work/shared/spec/paper-notes.md``)
applied to the query alone, never to the reply: "Other" for taste, style, mood; the scope is the
objects the query names; distortions are the categories the query names (the options of a
multiple-choice question included), per object, else null; the reference mode follows the input;
a tool is required only when the query names it as a tool, in any spelling or alias ("Multi-Scale
SSIM" is MS-SSIM), and a tool it rules out is excluded; flags are all off for "Other" (a tool the
query names is still run), detection exactly when no distortion is named, analysis on, and
tools: region and tool -> run without selection, region only -> none, tool only -> run without
selection, neither -> select and run.  A tool the catalogue lacks is no required tool: a tool is
selected and run, and the name as the query writes it is the plan's ``uncatalogued_tools``
(a catalogue name inside a longer one, "IL-NIQE", "LPIPS-VGG", "CLIP-IQA+", "NIQE v2", is such a
tool; "MS SSIM" and the catalogue's aliases are its tools).  A plan missing fields is graded
as any other: the grade is the query's.

"The model plans; the input only corrects what it disproves" adds: where the
query's words are ambiguous, the grade is what a careful reader derives, which is the model's
plan when that is a reasonable reading.  A word that may describe content ("the dark car", "a
flat roof", "the bright red jacket") names no distortion there; read as a distortion ("is this
photo dark?") it does.  A family name ("TOPIQ", "WaDIQaM") is the variant its qualifier says
("the full-reference one", "(NR)", "blind"), else the model's member of it, else the one that
fits the reference mode.  A question about what the picture shows ("what colour is the car?",
"how many people are there?") names no distortion: its grade is the paper's plan of a question
that names none, or the model's own reading where that is reasonable (tagged "model reading":
there the builtin planner, which has no model, may read it otherwise).

``flags`` spells the four flags as detection, analysis, selection, execution ("0111").  A scope
entry may give other spellings of the same object after "|" ("person's face|face").  Scope and
distortion keys are compared without case or a leading article; distortion lists as sets.

The corpus was written after the planner's reading fixes, by the author of those fixes, and
graded in full before it was first read by them: its figure is not an independent estimate.
The entries tagged "issue39" were written and graded with the second round of fixes (the
model plans), by their author, and are not independent either; so were those tagged
"issue49" (a tool the catalogue lacks; inflections of the vocabulary's words), graded before
the fixes were run on them.  Misses are kept as they are:
a grade follows the rules above, never the reader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from agentic_iqa.agents.planner import PlanningFailed, make_plan, reconcile
from agentic_iqa.state import PlannerOutput
from agentic_iqa.vlm.base import VLMRequest, VLMResponse
from iqa_tools import load_catalog


@dataclass(frozen=True)
class Want:
    """The plan a human derives from the query."""

    flags: str
    query_type: str = "IQA"
    query_scope: tuple[str, ...] | str = "Global"
    distortions: dict[str, tuple[str, ...]] | None = None
    required_tool: str | None = None
    excluded_tools: tuple[str, ...] = ()
    uncatalogued_tools: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlannerReply:
    name: str
    style: str
    query: str
    reference: bool
    reply: str
    want: Want
    tags: tuple[str, ...] = field(default=())


CORPUS: tuple[PlannerReply, ...] = (
    PlannerReply(
        "object blur",
        "gpt",
        "Is the car in this photo blurry?",
        False,
        """```json
{
  "query_type": "IQA",
  "query_scope": ["car"],
  "distortion_source": "Explicit",
  "distortions": {"car": ["Blurs"]},
  "reference_mode": "No-Reference",
  "required_tool": null,
  "plan": {"distortion_detection": false, "distortion_analysis": true,
           "tool_selection": false, "tool_execution": false},
  "answer_mode": "explanation"
}
```""",
        Want("0100", query_scope=("car",), distortions={"car": ("Blurs",)}),
    ),
    PlannerReply(
        "rate plain",
        "gpt",
        "Rate the quality of this image.",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": null, '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": true, "tool_execution": true}, "answer_mode": "scoring"}',
        Want("1111"),
    ),
    PlannerReply(
        "two objects prose",
        "claude",
        "How noisy is the sky compared to the person's face?",
        False,
        """Here's the plan for this query:

```json
{
  "query_type": "IQA",
  "query_scope": ["sky", "person's face"],
  "distortion_source": "Explicit",
  "distortions": {"sky": ["Noise"], "person's face": ["Noise"]},
  "reference_mode": "No-Reference",
  "required_tool": null,
  "plan": {
    "distortion_detection": false,
    "distortion_analysis": true,
    "tool_selection": false,
    "tool_execution": false
  },
  "answer_mode": "explanation"
}
```

The query names two regions and one distortion (noise), so detection is unnecessary and the
analysis can compare the noise level of each region directly.""",
        Want(
            "0100",
            query_scope=("sky", "person's face|face"),
            distortions={"sky": ("Noise",), "person's face": ("Noise",)},
        ),
    ),
    PlannerReply(
        "qwen spellings with tool",
        "qwen",
        "Use SSIM to judge this image against the reference.",
        True,
        '{"queryType": "iqa", "QueryScope": ["global"], "distortion source": "inferred", '
        '"distortions": null, "referenceMode": "full reference", "requiredTool": "ssim", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execute": true}}',
        Want("1101", required_tool="SSIM"),
    ),
    PlannerReply(
        "Q-Align spelling",
        "gpt",
        "Rate this image with Q-Align.",
        False,
        """```json
{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred",
 "distortions": null, "reference_mode": "No-Reference", "required_tool": "Q-Align",
 "plan": {"distortion_detection": true, "distortion_analysis": true,
          "tool_selection": false, "tool_execution": true},
 "answer_mode": "scoring"}
```""",
        Want("1101", required_tool="QAlign"),
        tags=("catalogue spelling",),
    ),
    PlannerReply(
        "CLIP-IQA spelling",
        "claude",
        "Use CLIP-IQA to check how sharp this photo is.",
        False,
        """I'll plan this as a sharpness check with the requested tool.

```json
{
  "query_type": "IQA",
  "query_scope": "Global",
  "distortion_source": "Explicit",
  "distortions": {"Global": ["Sharpness"]},
  "reference_mode": "No-Reference",
  "required_tool": "CLIP-IQA",
  "plan": {"distortion_detection": false, "distortion_analysis": true,
           "tool_selection": false, "tool_execution": true},
  "answer_mode": "explanation"
}
```

Since the user explicitly asked for CLIP-IQA, tool selection is skipped.""",
        Want("0101", distortions={"Global": ("Sharpness",)}, required_tool="CLIPIQA"),
        tags=("catalogue spelling",),
    ),
    PlannerReply(
        "MS SSIM spelling",
        "gpt",
        "Compare this image with the reference using MS SSIM.",
        True,
        '{"query_type":"IQA","query_scope":"Global","distortion_source":"Inferred",'
        '"distortions":null,"reference_mode":"Full-Reference","required_tool":"MS-SSIM",'
        '"plan":{"distortion_detection":true,"distortion_analysis":true,'
        '"tool_selection":false,"tool_execution":true},"answer_mode":"explanation"}',
        Want("1101", required_tool="MS-SSIM"),
        tags=("catalogue spelling",),
    ),
    PlannerReply(
        "unique as adjective",
        "gpt",
        "Is this street scene with unique architecture too dark?",
        False,
        """```json
{
  "query_type": "IQA",
  "query_scope": "Global",
  "distortion_source": "Explicit",
  "distortions": {"Global": ["Brightness change"]},
  "reference_mode": "No-Reference",
  "required_tool": null,
  "plan": {"distortion_detection": false, "distortion_analysis": true,
           "tool_selection": true, "tool_execution": true},
  "answer_mode": "explanation"
}
```""",
        Want("0111", distortions={"Global": ("Brightness change",)}),
        tags=("common word",),
    ),
    PlannerReply(
        "don't use NIQE",
        "qwen",
        "Don't use NIQE; just tell me how good this photo is.",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": "NIQE", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": true}, "answer_mode": "scoring"}',
        Want("1111", excluded_tools=("NIQE",)),
        tags=("exclusion",),
    ),
    PlannerReply(
        "tool not in catalogue",
        "claude",
        "Rate this image.",
        False,
        """Here is a plan:

```json
{
  "query_type": "IQA",
  "query_scope": "Global",
  "distortion_source": "Inferred",
  "distortions": null,
  "reference_mode": "No-Reference",
  "required_tool": "IQA-Net",
  "plan": {"distortion_detection": true, "distortion_analysis": true,
           "tool_selection": false, "tool_execution": true},
  "answer_mode": "scoring"
}
```

IQA-Net gives a general-purpose quality score, which suits an overall rating.""",
        Want("1111"),
        tags=("unknown tool",),
    ),
    PlannerReply(
        "named distortion omitted",
        "gpt",
        "Is the sky overexposed?",
        False,
        '{"query_type": "IQA", "query_scope": ["sky"], "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": null, '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": false}, "answer_mode": "explanation"}',
        Want("0100", query_scope=("sky",), distortions={"sky": ("Brightness change",)}),
        tags=("named distortion",),
    ),
    PlannerReply(
        "Other with flags on",
        "gpt",
        "Does this photo evoke a nostalgic mood?",
        False,
        """```json
{"query_type": "Other", "query_scope": "Global", "distortion_source": "Inferred",
 "distortions": null, "reference_mode": "No-Reference", "required_tool": null,
 "plan": {"distortion_detection": true, "distortion_analysis": true,
          "tool_selection": true, "tool_execution": true},
 "answer_mode": "explanation"}
```""",
        Want("0000", query_type="Other"),
        tags=("other",),
    ),
    PlannerReply(
        "Global key, object scope",
        "claude",
        "Is the dog's fur noisy?",
        False,
        """```json
{
  "query_type": "IQA",
  "query_scope": ["dog's fur"],
  "distortion_source": "Explicit",
  "distortions": {"Global": ["Noise"]},
  "reference_mode": "No-Reference",
  "required_tool": null,
  "plan": {"distortion_detection": false, "distortion_analysis": true,
           "tool_selection": false, "tool_execution": false}
}
```
The noise question is limited to the dog's fur.""",
        Want("0100", query_scope=("dog's fur|fur",), distortions={"dog's fur": ("Noise",)}),
        tags=("scope keys",),
    ),
    PlannerReply(
        "distortions None string",
        "qwen",
        "How good is this picture overall?",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": "None", "reference_mode": "No-Reference", "required_tool": "None", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": true, "tool_execution": true}}',
        Want("1111"),
        tags=("shape",),
    ),
    PlannerReply(
        "plan as list",
        "qwen",
        "Is there JPEG compression in this image?",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Explicit", '
        '"distortions": {"Global": ["Compression"]}, "reference_mode": "No-Reference", '
        '"required_tool": null, "plan": ["distortion_analysis", "tool_selection", '
        '"tool_execution"]}',
        Want("0111", distortions={"Global": ("Compression",)}),
        tags=("shape",),
    ),
    PlannerReply(
        "required tool as list",
        "qwen",
        "What is the BRISQUE score of this photo?",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": ["BRISQUE"], '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": true}}',
        Want("1101", required_tool="BRISQUE"),
        tags=("shape",),
    ),
    PlannerReply(
        "JSON with comments",
        "gpt",
        "Is the background blurry?",
        False,
        """```json
{
  "query_type": "IQA",            // technical quality question
  "query_scope": ["background"],  // the region named in the query
  "distortion_source": "Explicit",
  "distortions": {"background": ["Blurs"]},
  "reference_mode": "No-Reference",
  "required_tool": null,
  "plan": {
    "distortion_detection": false, // the distortion is named
    "distortion_analysis": true,
    "tool_selection": false,
    "tool_execution": false
  }
}
```""",
        Want("0100", query_scope=("background",), distortions={"background": ("Blurs",)}),
        tags=("shape",),
    ),
    PlannerReply(
        "scope comma string",
        "qwen",
        "Are the car and the sky noisy?",
        False,
        '{"query_type": "IQA", "query_scope": "car, sky", "distortion_source": "Explicit", '
        '"distortions": {"car": ["noise"], "sky": ["noise"]}, "reference_mode": "No-Reference", '
        '"required_tool": null, "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": false, "tool_execution": false}}',
        Want(
            "0100", query_scope=("car", "sky"), distortions={"car": ("Noise",), "sky": ("Noise",)}
        ),
        tags=("shape",),
    ),
    PlannerReply(
        "scope and-string, Global key",
        "claude",
        "Is the car or the sky out of focus?",
        False,
        """Plan:

```json
{
  "query_type": "IQA",
  "query_scope": "the car and the sky",
  "distortion_source": "Explicit",
  "distortions": {"Global": ["Blurs"]},
  "reference_mode": "No-Reference",
  "required_tool": null,
  "plan": {"distortion_detection": false, "distortion_analysis": true,
           "tool_selection": false, "tool_execution": false}
}
```""",
        Want(
            "0100", query_scope=("car", "sky"), distortions={"car": ("Blurs",), "sky": ("Blurs",)}
        ),
        tags=("shape", "scope keys"),
    ),
    PlannerReply(
        "MCQ distortion types",
        "gpt",
        "Which distortion is most severe in this image?\nA. Noise\nB. Blur\nC. JPEG compression"
        "\nD. Overexposure",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": null, '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": true, "tool_execution": true}, "answer_mode": "explanation"}',
        Want(
            "0111", distortions={"Global": ("Noise", "Blurs", "Compression", "Brightness change")}
        ),
        tags=("named distortion",),
    ),
    PlannerReply(
        "MCQ quality levels",
        "claude",
        "How would you rate the quality of this image?\nA. Excellent\nB. Good\nC. Fair\nD. Poor"
        "\nE. Bad",
        False,
        """This is a multiple-choice question about overall quality, so I'll plan a full
assessment:

```json
{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred",
 "distortions": null, "reference_mode": "No-Reference", "required_tool": null,
 "plan": {"distortion_detection": true, "distortion_analysis": true,
          "tool_selection": true, "tool_execution": true},
 "answer_mode": "explanation"}
```""",
        Want("1111"),
    ),
    PlannerReply(
        "full reference",
        "gpt",
        "How does this image compare to the reference in quality?",
        True,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "Full-Reference", "required_tool": null, '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": true, "tool_execution": true}, "answer_mode": "explanation"}',
        Want("1111"),
    ),
    PlannerReply(
        "reference mode wrong",
        "qwen",
        "Rate the quality of this image.",
        True,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "NR", "required_tool": null, '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": true, "tool_execution": true}}',
        Want("1111"),
    ),
    PlannerReply(
        "tool and region",
        "gpt",
        "Use BRISQUE to assess the noise on the person's face.",
        False,
        """```json
{
  "query_type": "IQA",
  "query_scope": ["person's face"],
  "distortion_source": "Explicit",
  "distortions": {"person's face": ["Noise"]},
  "reference_mode": "No-Reference",
  "required_tool": "BRISQUE",
  "plan": {"distortion_detection": false, "distortion_analysis": true,
           "tool_selection": false, "tool_execution": true},
  "answer_mode": "explanation"
}
```""",
        Want(
            "0101",
            query_scope=("person's face|face",),
            distortions={"person's face": ("Noise",)},
            required_tool="BRISQUE",
        ),
    ),
    PlannerReply(
        "flags beside the keys",
        "qwen",
        "Is the image too bright?",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Explicit", '
        '"distortions": {"Global": ["Brightness change"]}, "reference_mode": "No-Reference", '
        '"required_tool": null, "distortion_detection": false, "distortion_analysis": true, '
        '"tool_selection": true, "tool_execution": true}',
        Want("0111", distortions={"Global": ("Brightness change",)}),
    ),
    PlannerReply(
        "paper spellings",
        "qwen",
        "Are there color distortions in the flowers?",
        False,
        '{"query_type": "IQA", "query_scope": ["flowers"], "distortion_source": "Explict", '
        '"distortions": {"flowers": ["color distortion"]}, "reference_mode": "No-Reference", '
        '"required_tool": null, "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": false, "tool_execute": false}}',
        Want("0100", query_scope=("flowers",), distortions={"flowers": ("Color distortions",)}),
    ),
    PlannerReply(
        "aesthetic Other",
        "gpt",
        "Is this photo aesthetically pleasing?",
        False,
        '{"query_type": "Other", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": null, '
        '"plan": {"distortion_detection": false, "distortion_analysis": false, '
        '"tool_selection": false, "tool_execution": false}, "answer_mode": "explanation"}',
        Want("0000", query_type="Other"),
    ),
    PlannerReply(
        "Other with a named tool",
        "claude",
        "According to NIMA, how aesthetically pleasing is this photo?",
        False,
        """The user asks about aesthetics and names NIMA, an aesthetic assessment model.

```json
{
  "query_type": "Other",
  "query_scope": "Global",
  "distortion_source": "Inferred",
  "distortions": null,
  "reference_mode": "No-Reference",
  "required_tool": "NIMA",
  "plan": {"distortion_detection": false, "distortion_analysis": false,
           "tool_selection": false, "tool_execution": true}
}
```""",
        Want("0001", query_type="Other", required_tool="NIMA"),
        tags=("other",),
    ),
    PlannerReply(
        "extra distortion from the model",
        "gpt",
        "Is the photo blurry?",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Explicit", '
        '"distortions": {"Global": ["Blurs", "Sharpness"]}, "reference_mode": "No-Reference", '
        '"required_tool": null, "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": true, "tool_execution": true}, '
        '"answer_mode": "explanation"}',
        Want("0111", distortions={"Global": ("Blurs",)}),
    ),
    PlannerReply(
        "region with tools on",
        "claude",
        "Is the tree in the foreground sharp?",
        False,
        """```json
{
  "query_type": "IQA",
  "query_scope": ["tree"],
  "distortion_source": "Explicit",
  "distortions": {"tree": ["Sharpness"]},
  "reference_mode": "No-Reference",
  "required_tool": null,
  "plan": {"distortion_detection": false, "distortion_analysis": true,
           "tool_selection": true, "tool_execution": true}
}
```
A sharpness metric on the tree region would support the visual judgement.""",
        Want("0100", query_scope=("tree",), distortions={"tree": ("Sharpness",)}),
    ),
    PlannerReply(
        "composition called IQA",
        "gpt",
        "Is the composition of this photo balanced?",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": null, '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": true, "tool_execution": true}, "answer_mode": "explanation"}',
        Want("0000", query_type="Other"),
    ),
    PlannerReply(
        "region noise",
        "claude",
        "Is the lake noisy or grainy?",
        False,
        """Here's the plan:
```json
{"query_type": "IQA", "query_scope": ["lake"], "distortion_source": "Explicit",
 "distortions": {"lake": ["Noise"]}, "reference_mode": "No-Reference", "required_tool": null,
 "plan": {"distortion_detection": false, "distortion_analysis": true,
          "tool_selection": false, "tool_execution": false}}
```
"Noisy" and "grainy" both describe the Noise category.""",
        Want("0100", query_scope=("lake",), distortions={"lake": ("Noise",)}),
    ),
    PlannerReply(
        "yes/no free of noise",
        "qwen",
        "Is the image free of noise?\nA. Yes\nB. No",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Explict", '
        '"distortions": {"Global": ["Noise"]}, "reference_mode": "No-Reference", '
        '"required_tool": null, "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": true, "tool_execute": true}}',
        Want("0111", distortions={"Global": ("Noise",)}),
    ),
    PlannerReply(
        "LPIPS with reference",
        "gpt",
        "Evaluate the quality of this photo using LPIPS against the reference.",
        True,
        """```json
{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred",
 "distortions": null, "reference_mode": "Full-Reference", "required_tool": "LPIPS",
 "plan": {"distortion_detection": true, "distortion_analysis": true,
          "tool_selection": false, "tool_execution": true}, "answer_mode": "scoring"}
```""",
        Want("1101", required_tool="LPIPS"),
    ),
    PlannerReply(
        "use one tool, not another",
        "gpt",
        "Is the image compressed? Use PSNR, not SSIM.",
        True,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Explicit", '
        '"distortions": {"Global": ["Compression"]}, "reference_mode": "Full-Reference", '
        '"required_tool": "PSNR", "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": false, "tool_execution": true}}',
        Want(
            "0101",
            distortions={"Global": ("Compression",)},
            required_tool="PSNR",
            excluded_tools=("SSIM",),
        ),
        tags=("exclusion",),
    ),
    PlannerReply(
        "without two tools",
        "claude",
        "Rate this photo without BRISQUE or NIQE.",
        False,
        """Understood: the rating should not rely on BRISQUE or NIQE.

```json
{
  "query_type": "IQA",
  "query_scope": "Global",
  "distortion_source": "Inferred",
  "distortions": null,
  "reference_mode": "No-Reference",
  "required_tool": null,
  "plan": {"distortion_detection": true, "distortion_analysis": true,
           "tool_selection": true, "tool_execution": true},
  "answer_mode": "scoring"
}
```""",
        Want("1111", excluded_tools=("BRISQUE", "NIQE")),
        tags=("exclusion",),
    ),
    PlannerReply(
        "German rating",
        "gpt",
        "Bewerte die Qualität dieses Bildes.",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": null, '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": true, "tool_execution": true}, "answer_mode": "scoring"}',
        Want("1111"),
    ),
    PlannerReply(
        "low light omitted",
        "claude",
        "Was this photo taken in low light? Is it too dark?",
        False,
        """```json
{
  "query_type": "IQA",
  "query_scope": "Global",
  "distortion_source": "Inferred",
  "distortions": null,
  "reference_mode": "No-Reference",
  "required_tool": null,
  "plan": {"distortion_detection": true, "distortion_analysis": true,
           "tool_selection": true, "tool_execution": true}
}
```
Detection will establish whether under-exposure is present.""",
        Want("0111", distortions={"Global": ("Brightness change",)}),
        tags=("named distortion",),
    ),
    PlannerReply(
        "washed out",
        "gpt",
        "Does this photo look washed out?",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Explicit", '
        '"distortions": {"Global": ["Contrast"]}, "reference_mode": "No-Reference", '
        '"required_tool": null, "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": true, "tool_execution": true}}',
        Want("0111", distortions={"Global": ("Contrast",)}),
    ),
    PlannerReply(
        "one of two named distortions omitted",
        "qwen",
        "Is the image noisy and blurry?",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Explicit", '
        '"distortions": {"Global": ["Noise"]}, "reference_mode": "No-Reference", '
        '"required_tool": null, "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": true, "tool_execution": true}}',
        Want("0111", distortions={"Global": ("Noise", "Blurs")}),
        tags=("named distortion",),
    ),
    PlannerReply(
        "named tool omitted",
        "gpt",
        "What does MUSIQ say about this image?",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": null, '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": true, "tool_execution": true}}',
        Want("1101", required_tool="MUSIQ"),
    ),
    PlannerReply(
        "pyiqa spelling",
        "qwen",
        "Score this against the reference with TOPIQ-FR.",
        True,
        '{"query_type": "iqa", "query_scope": "global", "distortion_source": "inferred", '
        '"distortions": null, "reference_mode": "full-reference", "required_tool": "topiq_fr", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": true}}',
        Want("1101", required_tool="TOPIQ_FR"),
        tags=("catalogue spelling",),
    ),
    PlannerReply(
        "plan as string",
        "qwen",
        "Assess the image quality.",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": "none", "reference_mode": "No-Reference", "required_tool": "none", '
        '"plan": "distortion_detection, distortion_analysis, tool_selection, tool_execution"}',
        Want("1111"),
        tags=("shape",),
    ),
    PlannerReply(
        "comments and trailing comma",
        "claude",
        "Is the top-left corner of the image too bright?",
        False,
        """Here is my plan (comments explain each choice):

```json
{
  "query_type": "IQA",
  "query_scope": ["top-left corner"], // a region named by position
  "distortion_source": "Explicit",
  "distortions": {"top-left corner": ["Brightness change"]},
  "reference_mode": "No-Reference",
  "required_tool": null,
  "plan": {
    "distortion_detection": false,
    "distortion_analysis": true,
    "tool_selection": false,
    "tool_execution": false,
  },
}
```""",
        Want(
            "0100",
            query_scope=("top-left corner",),
            distortions={"top-left corner": ("Brightness change",)},
        ),
        tags=("shape",),
    ),
    PlannerReply(
        "Global list scope, lower-case key",
        "qwen",
        "How noisy is this image?",
        False,
        '{"query_type": "IQA", "query_scope": ["Global"], "distortion_source": "Explicit", '
        '"distortions": {"global": ["noise"]}, "reference_mode": "No-Reference", '
        '"required_tool": "None", "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": true, "tool_execution": true}}',
        Want("0111", distortions={"Global": ("Noise",)}),
    ),
    PlannerReply(
        "Other with an object",
        "gpt",
        "Does the sunset look romantic?",
        False,
        '{"query_type": "Other", "query_scope": ["sunset"], "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": null, '
        '"plan": {"distortion_detection": false, "distortion_analysis": false, '
        '"tool_selection": false, "tool_execution": false}}',
        Want("0000", query_type="Other", query_scope=("sunset",)),
    ),
    PlannerReply(
        "distortion the model invents",
        "gpt",
        "Rate this image.",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Explicit", '
        '"distortions": {"Global": ["Blurs"]}, "reference_mode": "No-Reference", '
        '"required_tool": null, "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": true, "tool_execution": true}, '
        '"answer_mode": "scoring"}',
        Want("1111"),
    ),
    PlannerReply(
        "a distortion word the query lists lack",
        "claude",
        "Is there visible chromatic aberration along the edges?",
        False,
        """Chromatic aberration is a colour fringing artefact, which falls under colour
distortions.

```json
{
  "query_type": "IQA",
  "query_scope": "Global",
  "distortion_source": "Explicit",
  "distortions": {"Global": ["Color distortions"]},
  "reference_mode": "No-Reference",
  "required_tool": null,
  "plan": {"distortion_detection": false, "distortion_analysis": true,
           "tool_selection": true, "tool_execution": true}
}
```""",
        Want("0111", distortions={"Global": ("Color distortions",)}),
    ),
    PlannerReply(
        "query tool not in catalogue",
        "qwen",
        "Rate this image with DeepIQA-X.",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": "DeepIQA-X", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": true}}',
        Want("1111", uncatalogued_tools=("DeepIQA-X",)),
        tags=("unknown tool",),
    ),
    PlannerReply(
        "unique as a plain word",
        "gpt",
        "What is unique about the noise in this image?",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Explicit", '
        '"distortions": {"Global": ["Noise"]}, "reference_mode": "No-Reference", '
        '"required_tool": "UNIQUE", "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": false, "tool_execution": true}}',
        Want("0111", distortions={"Global": ("Noise",)}),
        tags=("common word",),
    ),
    PlannerReply(
        "two objects two distortions",
        "claude",
        "Is the cat's fur sharp, and is the background blurry?",
        False,
        """```json
{
  "query_type": "IQA",
  "query_scope": ["cat's fur", "background"],
  "distortion_source": "Explicit",
  "distortions": {"cat's fur": ["Sharpness"], "background": ["Blurs"]},
  "reference_mode": "No-Reference",
  "required_tool": null,
  "plan": {"distortion_detection": false, "distortion_analysis": true,
           "tool_selection": false, "tool_execution": false}
}
```
Each region gets the distortion the user asked about.""",
        Want(
            "0100",
            query_scope=("cat's fur|fur", "background"),
            distortions={"cat's fur": ("Sharpness",), "background": ("Blurs",)},
        ),
    ),
    PlannerReply(
        "whole-image scope string, bool strings",
        "qwen",
        "What is the overall quality like?",
        False,
        '{"query_type": "IQA", "query_scope": "whole image", "distortion_source": "Inferred", '
        '"distortions": [], "reference_mode": "No-Reference", "required_tool": null, '
        '"plan": {"distortion_detection": "true", "distortion_analysis": "true", '
        '"tool_selection": "true", "tool_execution": "true"}}',
        Want("1111"),
    ),
    PlannerReply(
        "sharpness MCQ",
        "gpt",
        "How is the sharpness of the image?\nA. Good\nB. Fair\nC. Poor",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Explicit", '
        '"distortions": {"Global": ["Sharpness"]}, "reference_mode": "No-Reference", '
        '"required_tool": null, "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": true, "tool_execution": true}, '
        '"answer_mode": "explanation"}',
        Want("0111", distortions={"Global": ("Sharpness",)}),
    ),
    PlannerReply(
        "don't rely on a tool",
        "claude",
        "Is the image sharp enough for printing? Please don't rely on PSNR.",
        False,
        """```json
{
  "query_type": "IQA",
  "query_scope": "Global",
  "distortion_source": "Explicit",
  "distortions": {"Global": ["Sharpness"]},
  "reference_mode": "No-Reference",
  "required_tool": null,
  "plan": {"distortion_detection": false, "distortion_analysis": true,
           "tool_selection": true, "tool_execution": true}
}
```
PSNR needs a reference anyway, so a no-reference sharpness tool will be selected.""",
        Want("0111", distortions={"Global": ("Sharpness",)}, excluded_tools=("PSNR",)),
        tags=("exclusion",),
    ),
    PlannerReply(
        "score with unique",
        "gpt",
        "Score it with unique.",
        True,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "Full-Reference", "required_tool": "UNIQUE", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": true}, "answer_mode": "scoring"}',
        Want("1101", required_tool="UNIQUE"),
        tags=("common word",),
    ),
    PlannerReply(
        "object key spelled with article",
        "gpt",
        "Is the building too dark?",
        False,
        '{"query_type": "IQA", "query_scope": ["building"], "distortion_source": "Explicit", '
        '"distortions": {"the building": ["Brightness change"]}, '
        '"reference_mode": "No-Reference", "required_tool": null, '
        '"plan": {"distortion_detection": false, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": false}}',
        Want("0100", query_scope=("building",), distortions={"building": ("Brightness change",)}),
        tags=("scope keys",),
    ),
    PlannerReply(
        "scope Global, object key",
        "qwen",
        "Are the leaves of the plant blurry?",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Explicit", '
        '"distortions": {"leaves": ["blur"]}, "reference_mode": "No-Reference", '
        '"required_tool": null, "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": false, "tool_execution": false}}',
        Want("0100", query_scope=("leaves",), distortions={"leaves": ("Blurs",)}),
        tags=("scope keys",),
    ),
    PlannerReply(
        "noise on the face with a tool list",
        "claude",
        "Measure the noise on the face with NIQE.",
        False,
        """```json
{
  "query_type": "IQA",
  "query_scope": ["face"],
  "distortion_source": "Explicit",
  "distortions": {"face": ["Noise"]},
  "reference_mode": "No-Reference",
  "required_tool": ["NIQE"],
  "plan": {"distortion_detection": false, "distortion_analysis": true,
           "tool_selection": false, "tool_execution": true}
}
```""",
        Want("0101", query_scope=("face",), distortions={"face": ("Noise",)}, required_tool="NIQE"),
    ),
    PlannerReply(
        "Other scored as IQA with a colour word",
        "gpt",
        "Do the warm colours make this photo feel cozy?",
        False,
        '{"query_type": "Other", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": null, '
        '"plan": {"distortion_detection": false, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": false}}',
        Want("0000", query_type="Other"),
        tags=("other",),
    ),
    # -- the model plans; the input only corrects what it disproves -------------------------
    PlannerReply(
        "Multi-Scale SSIM index",
        "gpt",
        "Check this with the Multi-Scale SSIM index.",
        True,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "Full-Reference", "required_tool": "MS-SSIM", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": true}, "answer_mode": "explanation"}',
        Want("1101", required_tool="MS-SSIM"),
        tags=("issue39", "alias"),
    ),
    PlannerReply(
        "structural similarity index",
        "claude",
        "Compare it with the reference using the structural similarity index.",
        True,
        """I'll compare the image against its reference with the requested metric.

```json
{
  "query_type": "IQA",
  "query_scope": "Global",
  "distortion_source": "Inferred",
  "distortions": null,
  "reference_mode": "Full-Reference",
  "required_tool": "SSIM",
  "plan": {"distortion_detection": true, "distortion_analysis": true,
           "tool_selection": false, "tool_execution": true},
  "answer_mode": "explanation"
}
```

SSIM (the structural similarity index) needs the reference, which is given.""",
        Want("1101", required_tool="SSIM"),
        tags=("issue39", "alias"),
    ),
    PlannerReply(
        "peak signal-to-noise ratio",
        "gpt",
        "What is the peak signal-to-noise ratio of this image against the reference?",
        True,
        '```json\n{"query_type": "IQA", "query_scope": "Global", "distortion_source": '
        '"Inferred", "distortions": null, "reference_mode": "Full-Reference", '
        '"required_tool": "PSNR", "plan": {"distortion_detection": true, '
        '"distortion_analysis": true, "tool_selection": false, "tool_execution": true}, '
        '"answer_mode": "explanation"}\n```',
        Want("1101", required_tool="PSNR"),
        tags=("issue39", "alias"),
    ),
    PlannerReply(
        "signal to noise written apart",
        "qwen",
        "Is the image noisy? Check it with the peak signal to noise ratio.",
        True,
        '{"queryType": "iqa", "queryScope": "global", "distortionSource": "explict", '
        '"distortions": {"global": ["noise"]}, "referenceMode": "full-reference", '
        '"requiredTool": "psnr", "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": false, "tool_execute": true}}',
        Want("0101", distortions={"Global": ("Noise",)}, required_tool="PSNR"),
        tags=("issue39", "alias"),
    ),
    PlannerReply(
        "visual information fidelity",
        "gpt",
        "Measure the visual information fidelity of this image to its reference.",
        True,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "Full-Reference", "required_tool": "VIF", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": true}}',
        Want("1101", required_tool="VIF"),
        tags=("issue39", "alias"),
    ),
    PlannerReply(
        "natural image quality evaluator",
        "claude",
        "Rate this photo with the Natural Image Quality Evaluator.",
        False,
        """```json
{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred",
 "distortions": null, "reference_mode": "No-Reference", "required_tool": "NIQE",
 "plan": {"distortion_detection": true, "distortion_analysis": true,
          "tool_selection": false, "tool_execution": true},
 "answer_mode": "scoring"}
```

The Natural Image Quality Evaluator is NIQE, a no-reference metric.""",
        Want("1101", required_tool="NIQE"),
        tags=("issue39", "alias"),
    ),
    PlannerReply(
        "gradient magnitude similarity deviation",
        "qwen",
        "Use gradient-magnitude similarity deviation to compare it with the reference.",
        True,
        '{"query_type": "iqa", "query_scope": ["Global"], "distortion_source": "inferred", '
        '"distortions": "none", "reference_mode": "full reference", "required_tool": "gmsd", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execute": true}}',
        Want("1101", required_tool="GMSD"),
        tags=("issue39", "alias"),
    ),
    PlannerReply(
        "multiscale structural similarity",
        "gpt",
        "Score this against the reference with multiscale structural similarity.",
        True,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "Full-Reference", "required_tool": "MS-SSIM", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": true}, "answer_mode": "scoring"}',
        Want("1101", required_tool="MS-SSIM"),
        tags=("issue39", "alias"),
    ),
    PlannerReply(
        "feature similarity",
        "claude",
        "How similar is this image to the reference by feature similarity (FSIM)?",
        True,
        """Plan:

```json
{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred",
 "distortions": null, "reference_mode": "Full-Reference", "required_tool": "FSIM",
 "plan": {"distortion_detection": true, "distortion_analysis": true,
          "tool_selection": false, "tool_execution": true}}
```""",
        Want("1101", required_tool="FSIM"),
        tags=("issue39", "alias"),
    ),
    PlannerReply(
        "clip iqa lower case",
        "gpt",
        "Use clip iqa to check whether the photo is blurry.",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Explicit", '
        '"distortions": {"Global": ["Blurs"]}, "reference_mode": "No-Reference", '
        '"required_tool": "CLIP-IQA", "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": false, "tool_execution": true}}',
        Want("0101", distortions={"Global": ("Blurs",)}, required_tool="CLIPIQA"),
        tags=("issue39", "alias"),
    ),
    PlannerReply(
        "no-reference WaDIQaM on noise",
        "claude",
        "Is the photo noisy according to the no-reference WaDIQaM?",
        False,
        """```json
{
  "query_type": "IQA",
  "query_scope": "Global",
  "distortion_source": "Explicit",
  "distortions": {"Global": ["Noise"]},
  "reference_mode": "No-Reference",
  "required_tool": "WaDIQaM_NR",
  "plan": {"distortion_detection": false, "distortion_analysis": true,
           "tool_selection": false, "tool_execution": true}
}
```""",
        Want("0101", distortions={"Global": ("Noise",)}, required_tool="WaDIQaM_NR"),
        tags=("issue39", "alias", "family"),
    ),
    PlannerReply(
        "TOPIQ, the full-reference one",
        "gpt",
        "Score it with TOPIQ, the full-reference one.",
        True,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "Full-Reference", "required_tool": "TOPIQ_FR", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": true}, "answer_mode": "scoring"}',
        Want("1101", required_tool="TOPIQ_FR"),
        tags=("issue39", "family"),
    ),
    PlannerReply(
        "TOPIQ (full-reference) display name",
        "qwen",
        "Use TOPIQ (full-reference) on this image and its reference.",
        True,
        '{"queryType": "iqa", "queryScope": "global", "distortionSource": "inferred", '
        '"distortions": null, "referenceMode": "FR", "requiredTool": "TOPIQ (full-reference)", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execute": true}}',
        Want("1101", required_tool="TOPIQ_FR"),
        tags=("issue39", "family"),
    ),
    PlannerReply(
        "full-reference version of TOPIQ",
        "claude",
        "Rate this image with the full-reference version of TOPIQ.",
        True,
        """```json
{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred",
 "distortions": null, "reference_mode": "Full-Reference", "required_tool": "TOPIQ_FR",
 "plan": {"distortion_detection": true, "distortion_analysis": true,
          "tool_selection": false, "tool_execution": true},
 "answer_mode": "scoring"}
```""",
        Want("1101", required_tool="TOPIQ_FR"),
        tags=("issue39", "family"),
    ),
    PlannerReply(
        "bare TOPIQ, family name as the tool",
        "gpt",
        "Score it with TOPIQ.",
        True,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "Full-Reference", "required_tool": "TOPIQ", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": true}, "answer_mode": "scoring"}',
        Want("1101", required_tool="TOPIQ_FR"),
        tags=("issue39", "family"),
    ),
    PlannerReply(
        "bare WaDIQaM, the model's member",
        "gpt",
        "Use WaDIQaM to rate this image.",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": "WaDIQaM_NR", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": true}, "answer_mode": "scoring"}',
        Want("1101", required_tool="WaDIQaM_NR"),
        tags=("issue39", "family"),
    ),
    PlannerReply(
        "bare WaDIQaM with a reference",
        "claude",
        "Use WaDIQaM to rate this image against the reference.",
        True,
        """The user names the WaDIQaM family; with a reference image the full-reference variant
applies.

```json
{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred",
 "distortions": null, "reference_mode": "Full-Reference", "required_tool": "WaDIQaM",
 "plan": {"distortion_detection": true, "distortion_analysis": true,
          "tool_selection": false, "tool_execution": true}}
```""",
        Want("1101", required_tool="WaDIQaM_FR"),
        tags=("issue39", "family"),
    ),
    PlannerReply(
        "qualifier overrides the model's member",
        "gpt",
        "Use WaDIQaM in its no-reference form, even though a reference is given.",
        True,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "Full-Reference", "required_tool": "WaDIQaM_FR", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": true}}',
        Want("1101", required_tool="WaDIQaM_NR"),
        tags=("issue39", "family"),
    ),
    PlannerReply(
        "a family ruled out",
        "qwen",
        "Don't use WaDIQaM; just rate the image.",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": "WaDIQaM_NR", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": true}, "answer_mode": "scoring"}',
        Want("1111", excluded_tools=("WaDIQaM_FR", "WaDIQaM_NR")),
        tags=("issue39", "family"),
    ),
    PlannerReply(
        "SSIM, not the multi-scale one",
        "gpt",
        "Compare it to the reference with SSIM, not the multi-scale SSIM.",
        True,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "Full-Reference", "required_tool": "SSIM", '
        '"excluded_tools": ["MS-SSIM"], "plan": {"distortion_detection": true, '
        '"distortion_analysis": true, "tool_selection": false, "tool_execution": true}}',
        Want("1101", required_tool="SSIM", excluded_tools=("MS-SSIM",)),
        tags=("issue39", "alias", "exclusion"),
    ),
    PlannerReply(
        "a variant the catalogue lacks",
        "claude",
        "Rate it with the NR version of TOPIQ.",
        False,
        """```json
{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred",
 "distortions": null, "reference_mode": "No-Reference", "required_tool": "TOPIQ_FR",
 "plan": {"distortion_detection": true, "distortion_analysis": true,
          "tool_selection": false, "tool_execution": true},
 "answer_mode": "scoring"}
```

TOPIQ_FR is the closest available TOPIQ model.""",
        Want("1111", uncatalogued_tools=("TOPIQ (no-reference)",)),
        tags=("issue39", "family"),
    ),
    PlannerReply(
        "dark as a colour of the car",
        "gpt",
        "Is the dark car in the driveway blurry?",
        False,
        '{"query_type": "IQA", "query_scope": ["car"], "distortion_source": "Explicit", '
        '"distortions": {"car": ["Blurs"]}, "reference_mode": "No-Reference", '
        '"required_tool": null, "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": false, "tool_execution": false}}',
        Want("0100", query_scope=("car|dark car",), distortions={"car": ("Blurs",)}),
        tags=("issue39", "ambiguous word"),
    ),
    PlannerReply(
        "bright as a colour of the jacket",
        "claude",
        "Is the bright red jacket noisy?",
        False,
        """```json
{
  "query_type": "IQA",
  "query_scope": ["jacket"],
  "distortion_source": "Explicit",
  "distortions": {"jacket": ["Noise"]},
  "reference_mode": "No-Reference",
  "required_tool": null,
  "plan": {"distortion_detection": false, "distortion_analysis": true,
           "tool_selection": false, "tool_execution": false}
}
```

"Bright red" describes the jacket; the question is about noise.""",
        Want("0100", query_scope=("jacket|red jacket",), distortions={"jacket": ("Noise",)}),
        tags=("issue39", "ambiguous word"),
    ),
    PlannerReply(
        "flat as the shape of the roof",
        "qwen",
        "Does the flat roof of the barn look noisy?",
        False,
        '{"queryType": "iqa", "queryScope": ["roof"], "distortionSource": "explicit", '
        '"distortions": {"roof": ["noise"]}, "referenceMode": "no reference", '
        '"requiredTool": null, "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": false, "tool_execute": false}}',
        Want("0100", query_scope=("roof|flat roof",), distortions={"roof": ("Noise",)}),
        tags=("issue39", "ambiguous word"),
    ),
    PlannerReply(
        "dark as the brightness of the photo",
        "gpt",
        "Is this photo dark?",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Explicit", '
        '"distortions": {"Global": ["Brightness change"]}, "reference_mode": "No-Reference", '
        '"required_tool": null, "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": true, "tool_execution": true}}',
        Want("0111", distortions={"Global": ("Brightness change",)}),
        tags=("issue39", "ambiguous word"),
    ),
    PlannerReply(
        "lighting as exposure",
        "claude",
        "Is the lighting in this photo good?",
        False,
        """```json
{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Explicit",
 "distortions": {"Global": ["Brightness change"]}, "reference_mode": "No-Reference",
 "required_tool": null,
 "plan": {"distortion_detection": false, "distortion_analysis": true,
          "tool_selection": true, "tool_execution": true}}
```""",
        Want("0111", distortions={"Global": ("Brightness change",)}),
        tags=("issue39", "ambiguous word"),
    ),
    PlannerReply(
        "colour of the sky as a distortion",
        "gpt",
        "Is the colour of the sky natural?",
        False,
        '{"query_type": "IQA", "query_scope": ["sky"], "distortion_source": "Explicit", '
        '"distortions": {"sky": ["Color distortions"]}, "reference_mode": "No-Reference", '
        '"required_tool": null, "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": false, "tool_execution": false}}',
        Want("0100", query_scope=("sky",), distortions={"sky": ("Color distortions",)}),
        tags=("issue39", "ambiguous word"),
    ),
    PlannerReply(
        "clear read as sharpness",
        "claude",
        "How clear is the text on the sign?",
        False,
        """```json
{"query_type": "IQA", "query_scope": ["text"], "distortion_source": "Explicit",
 "distortions": {"text": ["Sharpness"]}, "reference_mode": "No-Reference",
 "required_tool": null,
 "plan": {"distortion_detection": false, "distortion_analysis": true,
          "tool_selection": false, "tool_execution": false}}
```

Legibility of the text is a question of sharpness.""",
        Want("0100", query_scope=("text|text on the sign",), distortions={"text": ("Sharpness",)}),
        tags=("issue39", "ambiguous word", "model reading"),
    ),
    PlannerReply(
        "what color is the car",
        "gpt",
        "What color is the car?",
        False,
        '{"query_type": "IQA", "query_scope": ["car"], "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": null, '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": false}, "answer_mode": "explanation"}',
        Want("1100", query_scope=("car",)),
        tags=("issue39", "content question"),
    ),
    PlannerReply(
        "tell me what colour the bus is",
        "qwen",
        "Tell me what colour the bus is.",
        False,
        '{"queryType": "iqa", "queryScope": ["bus"], "distortionSource": "inferred", '
        '"distortions": null, "referenceMode": "no reference", "requiredTool": null, '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execute": false}}',
        Want("1100", query_scope=("bus",)),
        tags=("issue39", "content question"),
    ),
    PlannerReply(
        "content and a distortion in one question",
        "claude",
        "What colour are the flowers, and are they in focus?",
        False,
        """```json
{"query_type": "IQA", "query_scope": ["flowers"], "distortion_source": "Explicit",
 "distortions": {"flowers": ["Blurs"]}, "reference_mode": "No-Reference",
 "required_tool": null,
 "plan": {"distortion_detection": false, "distortion_analysis": true,
          "tool_selection": false, "tool_execution": false}}
```

The colour is read from the image; focus is the quality question.""",
        Want("0100", query_scope=("flowers",), distortions={"flowers": ("Blurs",)}),
        tags=("issue39", "content question"),
    ),
    PlannerReply(
        "how many people",
        "gpt",
        "How many people are in this picture?",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": null, '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": true, "tool_execution": true}}',
        Want("1111"),
        tags=("issue39", "content question"),
    ),
    PlannerReply(
        "what does the sign say",
        "claude",
        "What does the sign say?",
        False,
        """```json
{"query_type": "IQA", "query_scope": ["sign"], "distortion_source": "Inferred",
 "distortions": null, "reference_mode": "No-Reference", "required_tool": null,
 "plan": {"distortion_detection": true, "distortion_analysis": true,
          "tool_selection": false, "tool_execution": false}}
```""",
        Want("1100", query_scope=("sign",)),
        tags=("issue39", "content question"),
    ),
    PlannerReply(
        "what is in the picture, read as Other",
        "gpt",
        "What is in the picture?",
        False,
        '{"query_type": "Other", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": null, '
        '"plan": {"distortion_detection": false, "distortion_analysis": false, '
        '"tool_selection": false, "tool_execution": false}}',
        Want("0000", query_type="Other"),
        tags=("issue39", "content question", "model reading"),
    ),
    PlannerReply(
        "which animal, colour of its fur",
        "qwen",
        "Which animal is this, and what colour is its fur?",
        False,
        '{"query_type": "IQA", "query_scope": ["fur"], "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": null, '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": false}}',
        Want("1100", query_scope=("fur",)),
        tags=("issue39", "content question"),
    ),
    PlannerReply(
        "reply without reference mode and source",
        "gpt",
        "Is the sky noisy?",
        True,
        '{"query_type": "IQA", "query_scope": ["sky"], "distortions": {"sky": ["Noise"]}, '
        '"required_tool": null, "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": false, "tool_execution": false}}',
        Want("0100", query_scope=("sky",), distortions={"sky": ("Noise",)}),
        tags=("issue39", "missing fields"),
    ),
    PlannerReply(
        "reply without flags",
        "claude",
        "Rate this image.",
        False,
        """```json
{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred",
 "distortions": null, "reference_mode": "No-Reference", "required_tool": null,
 "answer_mode": "scoring"}
```

A general rating: detect, analyse, select and run tools.""",
        Want("1111"),
        tags=("issue39", "missing fields"),
    ),
    PlannerReply(
        "reply without two tool flags",
        "gpt",
        "Use BRISQUE on this photo.",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": "BRISQUE", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true}}',
        Want("1101", required_tool="BRISQUE"),
        tags=("issue39", "missing fields"),
    ),
    PlannerReply(
        "reply without scope",
        "gpt",
        "Is the car blurry?",
        False,
        '{"query_type": "IQA", "distortion_source": "Explicit", '
        '"distortions": {"car": ["Blurs"]}, "reference_mode": "No-Reference", '
        '"required_tool": null, "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": false, "tool_execution": false}}',
        Want("0100", query_scope=("car",), distortions={"car": ("Blurs",)}),
        tags=("issue39", "missing fields"),
    ),
    # -- issue 49: a tool the catalogue lacks is never another tool; every inflection is read --
    PlannerReply(
        "IL-NIQE read as NIQE",
        "gpt",
        "Score this image with IL-NIQE.",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": "NIQE", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": true}, "answer_mode": "scoring"}',
        Want("1111", uncatalogued_tools=("IL-NIQE",)),
        tags=("issue49", "unknown tool"),
    ),
    PlannerReply(
        "IL-NIQE written by the model",
        "claude",
        "Rate the quality of this photo using IL-NIQE, please.",
        False,
        """I'll plan this as a scoring request.

```json
{
  "query_type": "IQA",
  "query_scope": "Global",
  "distortion_source": "Inferred",
  "distortions": null,
  "reference_mode": "No-Reference",
  "required_tool": "IL-NIQE",
  "plan": {"distortion_detection": true, "distortion_analysis": true,
           "tool_selection": false, "tool_execution": true},
  "answer_mode": "scoring"
}
```

IL-NIQE is an opinion-unaware blind metric, which suits this request.""",
        Want("1111", uncatalogued_tools=("IL-NIQE",)),
        tags=("issue49", "unknown tool"),
    ),
    PlannerReply(
        "LPIPS variant with a reference",
        "claude",
        "Compare this image with its reference using LPIPS-VGG.",
        True,
        """```json
{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred",
 "distortions": null, "reference_mode": "Full-Reference", "required_tool": "LPIPS",
 "plan": {"distortion_detection": true, "distortion_analysis": true,
          "tool_selection": false, "tool_execution": true}}
```""",
        Want("1111", uncatalogued_tools=("LPIPS-VGG",)),
        tags=("issue49", "unknown tool"),
    ),
    PlannerReply(
        "CLIP-IQA+ in qwen keys",
        "qwen",
        "rate this image with clip-iqa+",
        False,
        '{"queryType": "iqa", "queryScope": "global", "distortionSource": "inferred", '
        '"distortions": null, "referenceMode": "no-reference", "requiredTool": "CLIP-IQA+", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execute": true}}',
        Want("1111", uncatalogued_tools=("clip-iqa+",)),
        tags=("issue49", "unknown tool"),
    ),
    PlannerReply(
        "MUSIQ trained on AVA",
        "gpt",
        "How good is this photo according to MUSIQ-AVA?",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": "MUSIQ", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": true}, "answer_mode": "scoring"}',
        Want("1111", uncatalogued_tools=("MUSIQ-AVA",)),
        tags=("issue49", "unknown tool"),
    ),
    PlannerReply(
        "a version and an exclusion",
        "claude",
        "Score it with NIQE v2, not with BRISQUE.",
        False,
        """```json
{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred",
 "distortions": null, "reference_mode": "No-Reference", "required_tool": "NIQE",
 "excluded_tools": ["BRISQUE"],
 "plan": {"distortion_detection": true, "distortion_analysis": true,
          "tool_selection": false, "tool_execution": true}}
```""",
        Want("1111", excluded_tools=("BRISQUE",), uncatalogued_tools=("NIQE v2",)),
        tags=("issue49", "unknown tool", "exclusion"),
    ),
    PlannerReply(
        "the catalogue tool, the longer one set aside",
        "gpt",
        "Use NIQE, not IL-NIQE, to rate this image.",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": "IL-NIQE", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": true}, "answer_mode": "scoring"}',
        Want("1101", required_tool="NIQE"),
        tags=("issue49", "unknown tool"),
    ),
    PlannerReply(
        "a region and a plus variant",
        "qwen",
        "Is the car blurry? Measure it with DBCNN++.",
        False,
        '{"query_type": "IQA", "query_scope": ["car"], "distortion_source": "explicit", '
        '"distortions": {"car": ["blur"]}, "reference_mode": "No-Reference", '
        '"required_tool": "DBCNN", "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": false, "tool_execution": true}}',
        Want(
            "0111",
            query_scope=("car",),
            distortions={"car": ("Blurs",)},
            uncatalogued_tools=("DBCNN++",),
        ),
        tags=("issue49", "unknown tool"),
    ),  # fmt: skip
    PlannerReply(
        "an acronym a space apart",
        "gpt",
        "Rate this image with IL NIQE.",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": "IL-NIQE", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": true, "tool_execution": true}, "answer_mode": "scoring"}',
        Want("1111", uncatalogued_tools=("IL NIQE",)),
        tags=("issue49", "unknown tool"),
    ),
    PlannerReply(
        "a respelling is still the tool",
        "claude",
        "Check this image against its reference with ms ssim.",
        True,
        """```json
{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred",
 "distortions": null, "reference_mode": "Full-Reference", "required_tool": "MS-SSIM",
 "plan": {"distortion_detection": true, "distortion_analysis": true,
          "tool_selection": false, "tool_execution": true}}
```""",
        Want("1101", required_tool="MS-SSIM"),
        tags=("issue49", "catalogue spelling"),
    ),
    PlannerReply(
        "the catalogue's own variant by its alias",
        "gpt",
        "Score this photo with MUSIQ-KonIQ.",
        False,
        '{"query_type": "IQA", "query_scope": "Global", "distortion_source": "Inferred", '
        '"distortions": null, "reference_mode": "No-Reference", "required_tool": "MUSIQ", '
        '"plan": {"distortion_detection": true, "distortion_analysis": true, '
        '"tool_selection": false, "tool_execution": true}, "answer_mode": "scoring"}',
        Want("1101", required_tool="MUSIQ"),
        tags=("issue49", "alias"),
    ),
    PlannerReply(
        "smearing as the model's label",
        "gpt",
        "Is the car smearing as it drives past?",
        False,
        '{"query_type": "IQA", "query_scope": ["car"], "distortion_source": "Explicit", '
        '"distortions": {"car": ["smearing"]}, "reference_mode": "No-Reference", '
        '"required_tool": null, "plan": {"distortion_detection": false, '
        '"distortion_analysis": true, "tool_selection": false, "tool_execution": false}}',
        Want("0100", query_scope=("car",), distortions={"car": ("Blurs",)}),
        tags=("issue49", "inflection"),
    ),
    PlannerReply(
        "noisier as the model's label",
        "claude",
        "Does the sky get noisier towards the corners?",
        False,
        """```json
{"query_type": "IQA", "query_scope": ["sky"], "distortion_source": "Explicit",
 "distortions": {"sky": ["noisier"]}, "reference_mode": "No-Reference",
 "required_tool": null,
 "plan": {"distortion_detection": false, "distortion_analysis": true,
          "tool_selection": false, "tool_execution": false}}
```""",
        Want("0100", query_scope=("sky",), distortions={"sky": ("Noise",)}),
        tags=("issue49", "inflection"),
    ),
    PlannerReply(
        "blurring and compressing as labels",
        "qwen",
        "Is there blurring or heavy compressing in this picture?",
        False,
        '{"query_type": "iqa", "query_scope": "global", "distortion_source": "explict", '
        '"distortions": {"global": ["blurring", "compressing"]}, '
        '"reference_mode": "no-reference", "required_tool": null, '
        '"plan": {"distortion_detection": false, "distortion_analysis": true, '
        '"tool_selection": true, "tool_execute": true}}',
        Want("0111", distortions={"Global": ("Blurs", "Compression")}),
        tags=("issue49", "inflection"),
    ),
    PlannerReply(
        "qwen reply without referenceMode and tool_execute",
        "qwen",
        "How noisy is this image?",
        False,
        '{"queryType": "iqa", "queryScope": "global", "distortionSource": "explict", '
        '"distortions": {"global": ["noise"]}, "requiredTool": null, '
        '"plan": {"distortion_detection": false, "distortion_analysis": true, '
        '"tool_selection": true}}',
        Want("0111", distortions={"Global": ("Noise",)}),
        tags=("issue39", "missing fields"),
    ),
    PlannerReply(
        "reply with only the query type",
        "claude",
        "How does this photo compare with its reference?",
        True,
        """```json
{"query_type": "IQA", "answer_mode": "explanation"}
```""",
        Want("1111"),
        tags=("issue39", "missing fields"),
    ),
)


# -- reading a reply as the agent does, and comparing with the human's plan -------------------

FIELDS = (
    "query_type",
    "query_scope",
    "distortions",
    "reference_mode",
    "required_tool",
    "excluded_tools",
    "uncatalogued_tools",
    "flags",
)


class OneReply:
    """A planner backend that writes ``text``: the reply goes through the agent's own path."""

    backend, model = "corpus", "corpus"

    def __init__(self, text: str) -> None:
        self.text = text

    def complete(self, request: VLMRequest) -> VLMResponse:
        return VLMResponse(self.text, self.model, finish_reason="stop")


def read(item: PlannerReply, tool_names: list[str]) -> PlannerOutput | None:
    """The plan the agent makes of ``item.reply`` (None: it read no plan)."""
    try:
        return make_plan(
            OneReply(item.reply),
            item.query,
            "image.png",
            "reference.png" if item.reference else None,
            tool_names,
        )
    except PlanningFailed:
        return None


def _fold(name: str) -> str:
    return re.sub(r"^(?:the|a|an)\s+", "", name.strip().casefold())


def _scope_names(want: Want) -> dict[str, str]:
    """Every accepted spelling of a wanted object, folded, to its first spelling."""
    names: dict[str, str] = {}
    for entry in want.query_scope if isinstance(want.query_scope, tuple) else ():
        spellings = entry.split("|")
        names.update({_fold(spelling): _fold(spellings[0]) for spelling in spellings})
    return names


def graded(plan: PlannerOutput | PlannerReply, names: dict[str, str]) -> dict[str, Any]:
    """The graded fields of a plan (or of an item's wanted plan) in one comparable form."""
    if isinstance(plan, PlannerReply):
        want = plan.want
        scope, distortions = want.query_scope, want.distortions
        values = {
            "query_type": want.query_type,
            "required_tool": want.required_tool,
            "excluded_tools": sorted(want.excluded_tools),
            "uncatalogued_tools": sorted(want.uncatalogued_tools),
            "flags": want.flags,
            "reference_mode": "Full-Reference" if plan.reference else "No-Reference",
        }
    else:
        scope, distortions = plan.query_scope, plan.distortions
        flags = plan.plan
        values = {
            "query_type": plan.query_type,
            "required_tool": plan.required_tool,
            "excluded_tools": sorted(getattr(plan, "excluded_tools", ())),
            "uncatalogued_tools": sorted(getattr(plan, "uncatalogued_tools", ())),
            "reference_mode": plan.reference_mode,
            "flags": "".join(
                "1" if on else "0"
                for on in (
                    flags.distortion_detection,
                    flags.distortion_analysis,
                    flags.tool_selection,
                    flags.tool_execution,
                )
            ),
        }

    def name(key: str) -> str:
        key = key.split("|")[0]
        return "Global" if key == "Global" else names.get(_fold(key), _fold(key))

    values["query_scope"] = (
        scope if isinstance(scope, str) else sorted(name(entry) for entry in scope)
    )
    values["distortions"] = (
        None
        if not distortions
        else {name(key): sorted(found) for key, found in distortions.items()}
    )
    return values


def differences(item: PlannerReply, plan: PlannerOutput | None) -> dict[str, tuple[Any, Any]]:
    """Field -> (the agent's, the human's) for each graded field where they differ."""
    names = _scope_names(item.want)
    want = graded(item, names)
    if plan is None:
        return {"plan": (None, want)}
    got = graded(plan, names)
    return {key: (got[key], want[key]) for key in FIELDS if got[key] != want[key]}


# -- plans built by hand, for the tests of the planner's reading --------------------------------

TOOLS = [spec.name for spec in load_catalog()]
ALL_ON = {
    "distortion_detection": True,
    "distortion_analysis": True,
    "tool_selection": True,
    "tool_execution": True,
}


def model_plan(**changes: Any) -> dict[str, Any]:
    """A model's plan as JSON data: the whole image, nothing named, every flag on."""
    return {
        "query_type": "IQA",
        "query_scope": "Global",
        "distortion_source": "Inferred",
        "distortions": None,
        "reference_mode": "No-Reference",
        "required_tool": None,
        "plan": dict(ALL_ON),
        **changes,
    }


def reconciled(query: str, reference: bool = False, **changes: Any) -> PlannerOutput:
    return reconcile(PlannerOutput.model_validate(model_plan(**changes)), query, reference, TOOLS)


def flags(plan: PlannerOutput) -> str:
    values = plan.plan
    return "".join(
        "1" if on else "0"
        for on in (
            values.distortion_detection,
            values.distortion_analysis,
            values.tool_selection,
            values.tool_execution,
        )
    )
