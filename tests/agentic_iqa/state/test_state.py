import json
import logging
import math
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from pydantic import ValidationError

from agentic_iqa.state import (
    DEFAULT_MAX_REPLAN_ITERATIONS,
    MAX_REPLAN_HISTORY,
    STORED,
    AgenticIQAState,
    DistortionAnalysis,
    ExecutorOutput,
    PlanControlFlags,
    PlannerError,
    PlannerInput,
    PlannerOutput,
    ReplanEntry,
    SummarizerOutput,
    ToolExecutionLog,
    initial_state,
    merge_state,
    record_replan,
    state_from_json,
    state_to_json,
)
from agentic_iqa.vocabulary import QUALITY_LEVELS, canonical_distortion

PLAN = {
    "query_type": "IQA",
    "query_scope": ["vehicle"],
    "distortion_source": "Explicit",
    "distortions": {"vehicle": ["Blurs"]},
    "reference_mode": "No-Reference",
    "required_tool": None,
    "plan": {
        "distortion_detection": False,
        "distortion_analysis": True,
        "tool_selection": False,
        "tool_execution": True,
    },
}
WHEN = datetime(2025, 11, 25, 12, 30, 15, 123456, tzinfo=UTC)


def plan(**changes) -> PlannerOutput:
    return PlannerOutput.model_validate({**PLAN, **changes})


def tool_log(**changes) -> ToolExecutionLog:
    fields = {
        "tool_name": "SSIM",
        "object_name": "Global",
        "distortion": "Blurs",
        "raw_score": 0.7,
        "normalized_score": 2.48,
        "execution_time": 0.12,
        "timestamp": WHEN,
    }
    return ToolExecutionLog(**{**fields, **changes})


def failed_log(**changes) -> ToolExecutionLog:
    return tool_log(
        **{
            "tool_name": "LPIPS",
            "raw_score": math.nan,
            "normalized_score": math.nan,
            "error": "LPIPS: weights missing",
            **changes,
        }
    )


def evidence() -> ExecutorOutput:
    return ExecutorOutput(
        distortion_set={"Global": ["Blurs", "Noise"]},
        distortion_analysis={
            "Global": [
                DistortionAnalysis(type="Blurs", severity="moderate", explanation="soft edges"),
            ]
        },
        selected_tools={"Global": {"Blurs": "SSIM"}},
        quality_scores={"Global": {"Blurs": ("SSIM", 2.48)}},
        tool_logs=[tool_log(), failed_log()],
    )


def summary(**changes) -> SummarizerOutput:
    return SummarizerOutput(**{"final_answer": "B", "quality_reasoning": "blurred", **changes})


def full_state() -> AgenticIQAState:
    state = initial_state("Is the car blurry?", "dist.png", "ref.png")
    state = merge_state(
        state,
        {
            "plan": plan(),
            "executor_evidence": evidence(),
            "summarizer_result": summary(
                quality_score=2.6,
                level_distribution={
                    "Bad": 0.1,
                    "Poor": 0.3,
                    "Fair": 0.4,
                    "Good": 0.15,
                    "Excellent": 0.05,
                },
                probability_source="logprobs",
            ),
        },
    )
    return record_replan(state, "no score for the car")


def error_of(exc_info: pytest.ExceptionInfo[ValidationError]) -> dict:
    errors = exc_info.value.errors()
    assert len(errors) == 1, errors
    return errors[0]


# -- PlannerOutput ----------------------------------------------------------------------------


def test_planner_output_parses_vlm_json_into_typed_fields():
    output = PlannerOutput.model_validate_json(json.dumps(PLAN))
    assert output.query_type == "IQA"
    assert output.query_scope == ["vehicle"]
    assert output.distortions == {"vehicle": ["Blurs"]}
    assert isinstance(output.plan, PlanControlFlags)
    assert output.plan.tool_execution is True and output.plan.tool_selection is False


def test_invalid_query_type_names_the_field():
    with pytest.raises(ValidationError) as exc_info:
        PlannerOutput.model_validate_json(json.dumps({**PLAN, "query_type": "INVALID"}))
    error = error_of(exc_info)
    assert error["loc"] == ("query_type",)
    assert error["type"] == "literal_error"
    assert error["input"] == "INVALID"


@pytest.mark.parametrize(
    "field, value",
    [
        ("distortion_source", "Guessed"),
        ("reference_mode", "Half-Reference"),
    ],
)
def test_other_literals_are_checked(field, value):
    with pytest.raises(ValidationError) as exc_info:
        plan(**{field: value})
    assert error_of(exc_info)["loc"] == (field,)


def test_a_plan_without_a_flag_is_rejected():
    flags = {k: v for k, v in PLAN["plan"].items() if k != "tool_selection"}
    with pytest.raises(ValidationError) as exc_info:
        plan(plan=flags)
    assert error_of(exc_info)["loc"] == ("plan", "tool_selection")


def test_the_papers_spellings_are_read_and_the_specs_are_written():
    flags = {k: v for k, v in PLAN["plan"].items() if k != "tool_execution"}
    output = PlannerOutput.model_validate_json(
        json.dumps(
            {
                **PLAN,
                "distortion_source": "Explict",
                "plan": {**flags, "tool_execute": True},
            }
        )
    )
    assert output.distortion_source == "Explicit"
    assert output.plan.tool_execution is True
    written = output.model_dump_json()
    assert '"tool_execution":true' in written and 'tool_execute"' not in written
    assert "Explict" not in written
    assert PlanControlFlags(**{**flags, "tool_execute": False}).tool_execution is False


@pytest.mark.parametrize(
    "scope, expected",
    [
        ("Global", "Global"),
        ("global", "Global"),
        ("the car", ["the car"]),
        ([], "Global"),
        (["car", " sky "], ["car", "sky"]),
    ],
)
def test_query_scope_is_a_list_of_names_or_global(scope, expected):
    assert plan(query_scope=scope).query_scope == expected


def test_query_scope_rejects_blank_names():
    with pytest.raises(ValidationError) as exc_info:
        plan(query_scope=["car", " "])
    locations = {error["loc"]: error["type"] for error in exc_info.value.errors()}
    assert locations[("query_scope", "list[constrained-str]", 1)] == "string_too_short"


def test_planner_distortions_take_synonyms_and_drop_what_names_no_category(caplog):
    assert plan(
        distortions={
            "Global": ["noise", " Color distortions ", "blur", "Rain"],
            "global": ["JPEG artifacts"],
        }
    ).distortions == {"Global": ["Noise", "Color distortions", "Blurs", "Compression"]}
    assert "'Rain' is no distortion category" in caplog.text
    # nothing usable left: no distortions named
    assert plan(distortions={"vehicle": ["Rain"]}).distortions is None
    assert plan(distortions={"car": "motion blur"}).distortions == {"car": ["Blurs"]}


def test_blank_required_tool_is_none():
    assert plan(required_tool="  ").required_tool is None
    assert plan(required_tool=" SSIM ").required_tool == "SSIM"


def test_planner_output_round_trips_through_dict_and_json():
    output = plan(distortion_source="Explict")
    assert PlannerOutput.model_validate(output.model_dump()) == output
    assert PlannerOutput.model_validate_json(output.model_dump_json()) == output
    assert output.model_dump()["plan"] == PLAN["plan"]


def test_equal_plans_compare_equal_and_serialize_identically():
    """Plans hold lists and dicts, so they are unhashable (the spec's "if all fields are hashable"
    does not hold); their JSON is the stable, hashable identity instead."""
    first, second = plan(), plan()
    assert first == second and first is not second
    assert first != plan(query_type="Other")
    with pytest.raises(TypeError):
        hash(first)
    assert hash(first.model_dump_json()) == hash(second.model_dump_json())


def test_planner_json_schema_describes_and_constrains_the_fields():
    schema = PlannerOutput.model_json_schema()
    json.dumps(schema)
    properties = schema["properties"]
    assert properties["query_type"]["enum"] == ["IQA", "Other"]
    assert properties["reference_mode"]["enum"] == ["Full-Reference", "No-Reference"]
    assert all(field.get("description") for field in properties.values())
    flags = schema["$defs"]["PlanControlFlags"]
    assert set(flags["required"]) == {
        "distortion_detection",
        "distortion_analysis",
        "tool_selection",
        "tool_execution",
    }
    items = properties["distortions"]["anyOf"][0]["additionalProperties"]["items"]
    assert items["enum"] == [
        "Blurs",
        "Color distortions",
        "Compression",
        "Noise",
        "Brightness change",
        "Sharpness",
        "Contrast",
    ]
    assert set(schema["required"]) == {
        "query_type",
        "query_scope",
        "distortion_source",
        "reference_mode",
        "plan",
    }


def test_planner_schema_examples_are_valid_plans():
    examples = PlannerOutput.model_config["json_schema_extra"]["examples"]
    assert examples[0]["query_scope"] == ["vehicle"]
    assert PlannerOutput.model_json_schema()["examples"] == examples
    for example in examples:
        PlannerOutput.model_validate(example)


# -- PlannerInput -----------------------------------------------------------------------------


@pytest.fixture
def image(tmp_path: Path) -> Path:
    path = tmp_path / "image.png"
    path.write_bytes(b"not decoded here")
    return path


def test_planner_input_accepts_existing_images(image, tmp_path):
    reference = tmp_path / "ref.JPG"
    reference.write_bytes(b"")
    planner_input = PlannerInput(
        query=" Is it blurry? ",
        image_path=image,
        reference_path=str(reference),
        prior_context={"round": 1},
    )
    assert planner_input.query == "Is it blurry?"
    assert planner_input.image_path == str(image)
    assert planner_input.reference_path == str(reference)


def test_missing_image_is_reported_with_its_path(tmp_path):
    missing = tmp_path / "missing.png"
    with pytest.raises(ValidationError) as exc_info:
        PlannerInput(query="q", image_path=str(missing))
    error = error_of(exc_info)
    assert error["loc"] == ("image_path",)
    assert error["msg"] == f"Value error, Image file not found: {missing}"


def test_reference_with_a_non_image_extension_is_rejected(image, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    with pytest.raises(ValidationError) as exc_info:
        PlannerInput(query="q", image_path=str(image), reference_path=str(notes))
    error = error_of(exc_info)
    assert error["loc"] == ("reference_path",)
    assert "Invalid image format" in error["msg"]


@pytest.mark.parametrize("query", ["", "   \n"])
def test_blank_query_fails_the_min_length_constraint(image, query):
    with pytest.raises(ValidationError) as exc_info:
        PlannerInput(query=query, image_path=str(image))
    error = error_of(exc_info)
    assert error["loc"] == ("query",) and error["type"] == "string_too_short"


# -- PlannerError ------------------------------------------------------------------------------


def test_planner_error_from_a_validation_error_keeps_retry_metadata(caplog):
    with pytest.raises(ValidationError) as exc_info:
        PlannerOutput.model_validate({**PLAN, "query_type": "INVALID"})
    with caplog.at_level(logging.WARNING, logger="agentic_iqa.state"):
        error = PlannerError.from_exception(
            exc_info.value,
            retry_count=1,
            attempt=2,
            backend="openai.gpt-4o",
        )
    assert error.error_type == "validation_error"
    assert error.exception_type == "pydantic_core._pydantic_core.ValidationError"
    assert "query_type" in error.message
    assert error.details["errors"][0]["loc"] == ["query_type"]
    assert (error.retry_count, error.attempt, error.backend) == (1, 2, "openai.gpt-4o")
    assert error.timestamp.tzinfo is UTC
    assert abs(datetime.now(UTC) - error.timestamp) < timedelta(seconds=5)
    assert "planner attempt 2 failed (backend openai.gpt-4o" in caplog.text
    assert PlannerError.model_validate_json(error.model_dump_json()) == error


@pytest.mark.parametrize(
    "exc, error_type, exception_type",
    [
        (TimeoutError(), "api_error", "TimeoutError"),
        (ConnectionResetError("reset"), "api_error", "ConnectionResetError"),
        (
            json.JSONDecodeError("Expecting value", "x", 0),
            "validation_error",
            "json.decoder.JSONDecodeError",
        ),
        (RuntimeError("boom"), "internal_error", "RuntimeError"),
    ],
)
def test_planner_error_types(exc, error_type, exception_type):
    error = PlannerError.from_exception(exc)
    assert (error.error_type, error.exception_type) == (error_type, exception_type)
    assert (error.attempt, error.retry_count, error.backend) == (1, 0, None)
    assert error.message


def test_planner_error_attempts_count_from_one():
    with pytest.raises(ValidationError) as exc_info:
        PlannerError.from_exception(RuntimeError("x"), attempt=0)
    assert error_of(exc_info)["loc"] == ("attempt",)


# -- DistortionAnalysis -----------------------------------------------------------------------


def test_distortion_analysis_fields():
    analysis = DistortionAnalysis(type="blurs", severity=" Severe ", explanation=" smeared ")
    assert (analysis.type, analysis.severity, analysis.explanation) == (
        "Blurs",
        "severe",
        "smeared",
    )


def test_invalid_severity_is_rejected():
    with pytest.raises(ValidationError) as exc_info:
        DistortionAnalysis(type="Noise", severity="terrible", explanation="grainy")
    error = error_of(exc_info)
    assert error["loc"] == ("severity",) and error["type"] == "literal_error"
    assert "'none', 'slight', 'moderate', 'severe' or 'extreme'" in error["msg"]


@pytest.mark.parametrize("explanation", ["", "   "])
def test_empty_explanation_is_rejected(explanation):
    with pytest.raises(ValidationError) as exc_info:
        DistortionAnalysis(type="Noise", severity="slight", explanation=explanation)
    assert error_of(exc_info)["loc"] == ("explanation",)


def test_all_distortion_analysis_fields_are_required():
    with pytest.raises(ValidationError) as exc_info:
        DistortionAnalysis()
    assert {e["loc"][0] for e in exc_info.value.errors()} == {"type", "severity", "explanation"}
    assert {e["type"] for e in exc_info.value.errors()} == {"missing"}


@pytest.mark.parametrize(
    ("written", "category"),
    [
        (" brightness CHANGE ", "Brightness change"),
        ("Blur", "Blurs"),
        ("blurry", "Blurs"),
        ("motion blur", "Blurs"),
        ("out of focus", "Blurs"),
        ("Noise", "Noise"),
        ("grain", "Noise"),
        ("JPEG compression artifacts", "Compression"),
        ("low contrast", "Contrast"),
        ("overexposure", "Brightness change"),
        ("colour cast", "Color distortions"),
        ("oversharpening", "Sharpness"),
    ],
)
def test_canonical_distortion_reads_what_models_write(written, category):
    assert canonical_distortion(written) == category


@pytest.mark.parametrize("written", ["Rain", "lens flare", "blur and noise", ""])
def test_canonical_distortion_refuses_no_category_or_two(written):
    with pytest.raises(ValueError, match="unknown distortion category"):
        canonical_distortion(written)


# -- ToolExecutionLog -------------------------------------------------------------------------


def test_tool_log_defaults():
    log = ToolExecutionLog(
        tool_name="SSIM",
        object_name="Global",
        distortion="noise",
        raw_score=0.9,
        normalized_score=4.0,
        execution_time=0.0,
    )
    assert (log.fallback, log.error, log.requested_tool, log.cached) == (False, None, None, False)
    assert log.distortion == "Noise"
    assert log.timestamp.tzinfo is UTC
    assert abs(datetime.now(UTC) - log.timestamp) < timedelta(seconds=5)


@pytest.mark.parametrize("score", [0.99, 5.01, math.nan, math.inf])
def test_normalized_score_must_be_in_range_without_error(score):
    with pytest.raises(ValidationError, match=r"normalized_score must be in \[1, 5\]"):
        tool_log(normalized_score=score)


def test_raw_score_must_be_finite_without_error():
    with pytest.raises(ValidationError, match="raw_score must be finite"):
        tool_log(raw_score=math.nan)


def test_failed_execution_may_record_nan_but_not_out_of_range_scores():
    failed = failed_log(fallback=True, requested_tool="LPIPS")
    assert math.isnan(failed.raw_score) and math.isnan(failed.normalized_score)
    assert failed.fallback and failed.error == "LPIPS: weights missing"
    assert (
        tool_log(error="LPIPS failed", fallback=True, tool_name="BRISQUE").normalized_score == 2.48
    )
    with pytest.raises(ValidationError, match=r"in \[1, 5\] or NaN, got 7.0"):
        failed_log(normalized_score=7.0)


@pytest.mark.parametrize("seconds", [-0.1, math.inf, math.nan])
def test_execution_time_is_a_non_negative_number(seconds):
    with pytest.raises(ValidationError) as exc_info:
        tool_log(execution_time=seconds)
    assert error_of(exc_info)["loc"] == ("execution_time",)


def test_timestamps_are_utc_and_must_carry_a_zone():
    plus_two = timezone(timedelta(hours=2))
    log = tool_log(timestamp=datetime(2025, 1, 1, 14, 0, tzinfo=plus_two))
    assert log.timestamp == datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
    assert log.timestamp.utcoffset() == timedelta(0)
    with pytest.raises(ValidationError) as exc_info:
        tool_log(timestamp=datetime(2025, 1, 1, 12, 0))
    assert error_of(exc_info)["type"] == "timezone_aware"


def test_nan_scores_survive_json_as_strict_json():
    failed = failed_log(cached=True)
    text = failed.model_dump_json()

    def no_constants(name):
        raise AssertionError(f"bare {name} is not JSON")

    document = json.loads(text, parse_constant=no_constants)
    assert document["raw_score"] == "NaN" and document["normalized_score"] == "NaN"
    assert document["timestamp"] == "2025-11-25T12:30:15.123456Z"
    revived = ToolExecutionLog.model_validate_json(text)
    assert math.isnan(revived.raw_score) and math.isnan(revived.normalized_score)
    assert revived == failed
    assert revived != failed_log(cached=False)
    assert revived != tool_log()


# -- ExecutorOutput ---------------------------------------------------------------------------


def test_executor_output_defaults():
    output = ExecutorOutput()
    assert (
        output.distortion_set,
        output.distortion_analysis,
        output.selected_tools,
        output.quality_scores,
        output.tool_logs,
    ) == (None, None, None, None, [])


def test_unknown_distortion_category_in_distortion_set_is_dropped():
    output = ExecutorOutput(distortion_set={"Global": ["Noise", "Haze", "lens flare"]})
    assert output.distortion_set == {"Global": ["Noise", "Contrast"]}


def test_unknown_distortion_category_in_distortion_analysis_is_dropped():
    output = ExecutorOutput(
        distortion_analysis={
            "car": [
                {"type": "Rain", "severity": "slight", "explanation": "streaks"},
                {"type": "blur", "severity": "Moderate", "explanation": "soft"},
            ]
        }
    )
    assert output.distortion_analysis["car"] == [
        DistortionAnalysis(type="Blurs", severity="moderate", explanation="soft")
    ]


def test_nested_analyses_are_validated():
    with pytest.raises(ValidationError) as exc_info:
        ExecutorOutput(
            distortion_analysis={
                "car": [
                    {"type": "Noise", "severity": "huge", "explanation": ""},
                ]
            }
        )
    assert {e["loc"] for e in exc_info.value.errors()} == {
        ("distortion_analysis", "car", 0, "severity"),
        ("distortion_analysis", "car", 0, "explanation"),
    }


def test_selected_tools_are_canonical_tool_names():
    output = ExecutorOutput(
        selected_tools={"Global": {"blurs": "ssim", "noise": "ms_ssim", "Contrast": "topiq-fr"}}
    )
    assert output.selected_tools == {
        "Global": {"Blurs": "SSIM", "Noise": "MS-SSIM", "Contrast": "TOPIQ_FR"}
    }
    # a key that names no distortion is no selection
    assert ExecutorOutput(selected_tools={"Global": {"Overall": "SSIM"}}).selected_tools == {
        "Global": {}
    }


def test_unknown_tool_is_rejected_by_name():
    with pytest.raises(ValidationError) as exc_info:
        ExecutorOutput(selected_tools={"Global": {"Blurs": "SuperIQA"}})
    error = error_of(exc_info)
    assert error["loc"] == ("selected_tools", "Global", "Blurs")
    assert "unknown tool 'SuperIQA'" in error["msg"] and "SSIM" in error["msg"]


def test_quality_scores_are_tool_score_pairs_in_range():
    output = ExecutorOutput(quality_scores={"Global": {"Blurs": ["ssim", "2.5"]}})
    assert output.quality_scores == {"Global": {"Blurs": ("SSIM", 2.5)}}
    for score in (0.5, 5.5, math.nan):
        with pytest.raises(ValidationError) as exc_info:
            ExecutorOutput(quality_scores={"Global": {"Blurs": ("SSIM", score)}})
        assert error_of(exc_info)["loc"] == ("quality_scores", "Global", "Blurs", 1)
    with pytest.raises(ValidationError, match="unknown tool 'Nope'"):
        ExecutorOutput(quality_scores={"Global": {"Blurs": ("Nope", 3.0)}})


def test_type_mismatches_name_the_field_and_the_expected_type():
    with pytest.raises(ValidationError) as exc_info:
        ExecutorOutput(distortion_set={"Global": 5}, tool_logs="none")
    messages = {e["loc"]: e["msg"] for e in exc_info.value.errors()}
    assert messages[("distortion_set", "Global")] == "Input should be a valid list"
    assert messages[("tool_logs",)] == "Input should be a valid list"


def test_executor_output_json_round_trip():
    output = evidence()
    text = output.model_dump_json()
    document = json.loads(text)
    assert document["distortion_analysis"]["Global"][0]["severity"] == "moderate"
    assert document["quality_scores"]["Global"]["Blurs"] == ["SSIM", 2.48]
    assert document["tool_logs"][0]["timestamp"] == "2025-11-25T12:30:15.123456Z"
    assert json.loads(ExecutorOutput(distortion_set={"Global": []}).model_dump_json()) == {
        "distortion_set": {"Global": []},
        "distortion_analysis": None,
        "selected_tools": None,
        "quality_scores": None,
        "tool_logs": [],
        "notes": [],
        "unavailable_tools": None,
    }
    missing = ExecutorOutput(unavailable_tools={"BRISQUE": "its parameter file is missing"})
    assert ExecutorOutput.model_validate_json(missing.model_dump_json()) == missing
    revived = ExecutorOutput.model_validate_json(text)
    assert revived == output
    assert isinstance(revived.distortion_analysis["Global"][0], DistortionAnalysis)
    assert isinstance(revived.tool_logs[1], ToolExecutionLog)
    assert revived.tool_logs[0].timestamp == WHEN
    assert isinstance(revived.quality_scores["Global"]["Blurs"], tuple)


def test_invalid_executor_json_is_rejected():
    with pytest.raises(ValidationError):
        ExecutorOutput.model_validate_json('{"tool_logs": [{"tool_name": "SSIM"}]}')
    with pytest.raises(ValidationError):
        ExecutorOutput.model_validate_json("{not json")


# -- SummarizerOutput -------------------------------------------------------------------------


def test_summarizer_strips_answer_and_reasoning():
    output = summary(final_answer="  Excellent\n", quality_reasoning="  sharp and clean ")
    assert (output.final_answer, output.quality_reasoning) == ("Excellent", "sharp and clean")
    assert (output.need_replan, output.replan_reason, output.used_evidence) == (False, None, None)


@pytest.mark.parametrize("field", ["final_answer", "quality_reasoning"])
@pytest.mark.parametrize("value", ["", "  \t"])
def test_summarizer_rejects_blank_answer_and_reasoning(field, value):
    with pytest.raises(ValidationError) as exc_info:
        summary(**{field: value})
    error = error_of(exc_info)
    assert error["loc"] == (field,) and error["type"] == "string_too_short"


def test_replan_without_reason_gets_a_placeholder_and_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="agentic_iqa.state"):
        output = summary(need_replan=True)
    assert output.replan_reason == "No reason provided"
    assert "replan without a reason" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="agentic_iqa.state"):
        given = summary(need_replan=True, replan_reason=" no vehicle score ")
    assert given.replan_reason == "no vehicle score"
    assert caplog.text == ""


def test_quality_score_is_in_range():
    assert summary(quality_score=3.25, probability_source="logprobs").quality_score == 3.25
    with pytest.raises(ValidationError) as exc_info:
        summary(quality_score=5.2, probability_source="logprobs")
    assert error_of(exc_info)["loc"] == ("quality_score",)


def test_a_score_says_where_it_came_from_and_a_stored_one_is_read_as_it_was():
    """The pipeline never gives a score without its source; a run stored before that rule
    (a model's own score in explanation mode) still loads, as it was written."""
    with pytest.raises(ValidationError, match="quality_score needs probability_source"):
        summary(quality_score=3.2)
    stored = summary().model_dump(mode="json") | {"quality_score": 3.2}
    assert SummarizerOutput.model_validate(stored, context=STORED).quality_score == 3.2


def test_level_distribution_is_a_distribution_over_the_five_levels():
    output = summary(
        level_distribution={"excellent": 0.1, "good": 0.2, "fair": 0.4, "poor": 0.2, "bad": 0.1},
        probability_source="logprobs",
    )
    assert list(output.level_distribution) == list(QUALITY_LEVELS)
    assert output.level_distribution["Fair"] == 0.4
    with pytest.raises(ValidationError, match="missing \\['Excellent'\\]"):
        summary(
            level_distribution={"Bad": 0.1, "Poor": 0.2, "Fair": 0.4, "Good": 0.3},
            probability_source="logprobs",
        )
    with pytest.raises(ValidationError, match="must sum to 1, sums to 0.9"):
        summary(
            level_distribution=dict.fromkeys(QUALITY_LEVELS, 0.18), probability_source="logprobs"
        )
    with pytest.raises(ValidationError, match="needs probability_source"):
        summary(level_distribution=dict.fromkeys(QUALITY_LEVELS, 0.2))


def test_summarizer_json_round_trip():
    output = summary(
        need_replan=True,
        replan_reason="missing",
        used_evidence={"scores": ["SSIM"]},
        quality_score=2.0,
        level_distribution=dict.fromkeys(QUALITY_LEVELS, 0.2),
        probability_source="verbalized confidence",
    )
    assert SummarizerOutput.model_validate_json(output.model_dump_json()) == output


def test_summarizer_schema_has_the_specs_examples():
    examples = SummarizerOutput.model_json_schema()["examples"]
    assert examples[0]["final_answer"] == "B" and examples[0]["need_replan"] is False
    assert examples[1]["replan_reason"] == "Missing tool scores for vehicle region"
    parsed = [SummarizerOutput.model_validate(example) for example in examples]
    assert parsed[1].need_replan and parsed[0].replan_reason is None


# -- State: merge rules -----------------------------------------------------------------------


def test_initial_state_sets_the_replanning_counters():
    state = initial_state("Rate this image", "a.png")
    assert state == {
        "query": "Rate this image",
        "image_path": "a.png",
        "iteration_count": 0,
        "max_replan_iterations": DEFAULT_MAX_REPLAN_ITERATIONS,
        "replan_history": [],
    }
    assert DEFAULT_MAX_REPLAN_ITERATIONS == 2
    assert initial_state("q", "a.png", "r.png")["reference_path"] == "r.png"
    with pytest.raises(ValueError, match="max_replan_iterations"):
        initial_state("q", "a.png", max_replan_iterations=-1)


def test_plan_is_replaced_and_nothing_else_changes():
    state = merge_state(initial_state("q", "a.png"), {"plan": plan(), "error": "first failed"})
    before = dict(state)
    newer = plan(query_scope="Global", distortions=None)
    merged = merge_state(state, {"plan": newer})
    assert merged["plan"] is newer
    assert {k: v for k, v in merged.items() if k != "plan"} == {
        k: v for k, v in before.items() if k != "plan"
    }
    assert state == before and state["plan"] == plan()


def test_error_is_replaced_and_none_removes_it():
    state = merge_state(initial_state("q", "a.png"), {"error": "timeout"})
    assert merge_state(state, {"error": "bad JSON"})["error"] == "bad JSON"
    cleared = merge_state(state, {"error": None})
    assert "error" not in cleared and state["error"] == "timeout"


def test_executor_evidence_accumulates():
    state = merge_state(
        initial_state("q", "a.png"), {"plan": plan(), "executor_evidence": evidence()}
    )
    retry_log = tool_log(tool_name="BRISQUE", raw_score=40.0, normalized_score=3.1)
    update = ExecutorOutput(
        quality_scores={"Global": {"Blurs": ("BRISQUE", 3.1)}}, tool_logs=[retry_log]
    )
    merged = merge_state(state, {"executor_evidence": update})
    result = merged["executor_evidence"]
    assert result.quality_scores == {"Global": {"Blurs": ("BRISQUE", 3.1)}}
    assert result.distortion_set == evidence().distortion_set
    assert result.selected_tools == evidence().selected_tools
    assert result.distortion_analysis == evidence().distortion_analysis
    assert result.tool_logs == [*evidence().tool_logs, retry_log]
    assert state["executor_evidence"] == evidence()
    assert merged["plan"] is state["plan"] and merged["query"] == "q"


def test_first_executor_evidence_is_set_as_is():
    output = evidence()
    assert (
        merge_state(initial_state("q", "a.png"), {"executor_evidence": output})["executor_evidence"]
        is output
    )


def test_summarizer_result_is_replaced_and_earlier_evidence_kept():
    state = merge_state(
        initial_state("q", "a.png"),
        {
            "plan": plan(),
            "executor_evidence": evidence(),
            "summarizer_result": summary(need_replan=True, replan_reason="no car score"),
        },
    )
    final = summary(final_answer="C")
    merged = merge_state(state, {"summarizer_result": final})
    assert merged["summarizer_result"] is final
    assert merged["plan"] is state["plan"]
    assert merged["executor_evidence"] is state["executor_evidence"]


def test_merge_never_mutates_and_copies_lists():
    state = record_replan(initial_state("q", "a.png"), "why")
    snapshot = state_to_json(state)
    merged = merge_state(state, {"query": "new question"})
    merged["replan_history"].append(ReplanEntry(iteration=9, reason="x"))
    assert merged["query"] == "new question"
    assert state_to_json(state) == snapshot


def test_merge_rejects_unknown_keys_and_removing_required_ones():
    state = initial_state("q", "a.png")
    with pytest.raises(ValueError, match=r"unknown state keys \['plann'\]"):
        merge_state(state, {"plann": plan()})
    with pytest.raises(ValueError, match="query is required"):
        merge_state(state, {"query": None})


# -- State: replanning ------------------------------------------------------------------------


def test_record_replan_counts_and_keeps_the_reason():
    state = initial_state("q", "a.png")
    once = record_replan(state, "Missing tool scores for vehicle region")
    twice = record_replan(once, "still missing")
    assert (state["iteration_count"], once["iteration_count"], twice["iteration_count"]) == (
        0,
        1,
        2,
    )
    assert [(e.iteration, e.reason) for e in twice["replan_history"]] == [
        (1, "Missing tool scores for vehicle region"),
        (2, "still missing"),
    ]
    assert twice["replan_history"][0].timestamp.tzinfo is UTC
    assert state["replan_history"] == [] and len(once["replan_history"]) == 1


def test_record_replan_without_counters():
    state = record_replan(AgenticIQAState(query="q", image_path="a.png"), "why")
    assert state["iteration_count"] == 1 and state["replan_history"][0].iteration == 1


def test_replan_history_is_capped_fifo_with_a_warning(caplog):
    state = initial_state("q", "a.png")
    with caplog.at_level(logging.WARNING, logger="agentic_iqa.state"):
        for round_ in range(1, MAX_REPLAN_HISTORY + 1):
            state = record_replan(state, f"reason {round_}")
        assert caplog.records == []
        state = record_replan(state, "reason 11")
        state = record_replan(state, "reason 12")
    assert MAX_REPLAN_HISTORY == 10
    assert state["iteration_count"] == 12
    assert [e.iteration for e in state["replan_history"]] == list(range(3, 13))
    assert state["replan_history"][-1].reason == "reason 12"
    assert [r.levelname for r in caplog.records] == ["WARNING", "WARNING"]
    assert "excessive replanning (11 rounds)" in caplog.records[0].getMessage()
    assert "dropped iterations [1]" in caplog.records[0].getMessage()


# -- State: JSON across processes -------------------------------------------------------------


def test_full_state_round_trips_through_json_exactly():
    state = full_state()
    text = state_to_json(state)
    revived = state_from_json(text)
    assert revived == state
    assert isinstance(revived["plan"], PlannerOutput)
    assert isinstance(revived["executor_evidence"], ExecutorOutput)
    assert isinstance(revived["summarizer_result"], SummarizerOutput)
    assert isinstance(revived["replan_history"][0], ReplanEntry)
    assert math.isnan(revived["executor_evidence"].tool_logs[1].normalized_score)
    assert revived["executor_evidence"].tool_logs[0].timestamp == WHEN
    assert state_to_json(revived) == text
    document = json.loads(text)
    assert document["executor_evidence"]["tool_logs"][1]["raw_score"] == "NaN"
    stamp = document["replan_history"][0]["timestamp"]
    assert datetime.fromisoformat(stamp).tzinfo is not None


def test_phase_two_state_round_trips_without_optional_keys():
    state = AgenticIQAState(query="q", image_path="a.png", plan=plan())
    revived = state_from_json(state_to_json(state))
    assert revived == state
    assert "executor_evidence" not in revived and "summarizer_result" not in revived


def test_state_json_is_validated_both_ways():
    with pytest.raises(ValidationError) as exc_info:
        state_from_json('{"query": "q"}')
    assert error_of(exc_info)["loc"] == ("image_path",)
    with pytest.raises(ValidationError) as exc_info:
        state_from_json('{"query": "q", "image_path": "a.png", "surprise": 1}')
    assert error_of(exc_info)["type"] == "extra_forbidden"
    with pytest.raises(ValidationError) as exc_info:
        state_to_json({"query": "q", "image_path": "a.png", "plan": {"query_type": "IQA"}})
    assert all(e["loc"][0] == "plan" for e in exc_info.value.errors())


def test_state_module_imports_no_heavy_dependencies():
    code = (
        "import sys, agentic_iqa.state; "
        "print(sorted(m for m in ('torch', 'pyiqa', 'celery', 'sqlalchemy') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
