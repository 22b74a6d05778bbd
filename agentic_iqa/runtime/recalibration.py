"""Recalibrating a tool on a user's own data: fit its logistic to a job's MOS.

The paper's parameters were fitted on KADID-10k; on other content (phone photos, medical,
generated images) a tool's raw scale maps differently.  ``agentic-iqa calibrate JOB --tool T``
runs T on the job's images (scores come from the cache when the job already ran it), maps MOS
linearly onto [1, 5], fits the five-parameter logistic, and writes a metadata override that
``metadata_overrides`` (or ``AGENTIC_IQA_METADATA_OVERRIDES``) merges over tools.json.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
from scipy.stats import spearmanr
from sqlalchemy import select
from sqlalchemy.engine import Engine

from iqa_tools import ToolError, get_registry
from iqa_tools.normalize import fit_monotone, normalize

from ..config import load_tool_settings
from ..db.engine import session_scope
from ..db.jobs import get_job
from ..db.models import JobItem


@dataclass(frozen=True)
class CalibrationResult:
    tool: str
    params: dict[str, float]
    items: int
    skipped: int
    mos_range: tuple[float, float]
    rmse_before: float
    rmse_after: float
    srcc: float
    path: Path
    #: The mapping kept (logistic5, else logistic4, else linear: the first that is monotone).
    form: str = "logistic5"
    fallback: str | None = None

    def summary(self) -> str:
        kept = "logistic" if self.form == "logistic5" else self.form
        why = f" ({self.form}: {self.fallback})" if self.fallback else ""
        return (
            f"{self.tool}: {kept} fitted on {self.items} items{why} "
            f"(MOS {self.mos_range[0]:g}..{self.mos_range[1]:g} mapped onto 1-5; "
            f"{self.skipped} skipped), SRCC {self.srcc:.3f}, RMSE on the 1-5 scale "
            f"{self.rmse_before:.3f} with the current mapping -> {self.rmse_after:.3f} fitted.\n"
            f"Override written to {self.path}; enable it with\n"
            f"  export AGENTIC_IQA_METADATA_OVERRIDES='[\"{self.path.resolve()}\"]'\n"
            "or list it under metadata_overrides in configs/tools.yaml."
        )


def calibrate_tool(
    engine: Engine,
    job_id: str,
    tool: str,
    *,
    output: Path | None = None,
    mos_range: tuple[float, float] | None = None,
) -> CalibrationResult:
    registry = get_registry(load_tool_settings())
    spec = registry.get(tool)
    with session_scope(engine) as session:
        get_job(session, job_id)
        items = cast(
            "list[tuple[str, str | None, float]]",  # the query keeps items with both
            session.execute(
                select(JobItem.image, JobItem.reference, JobItem.mos)
                .where(
                    JobItem.job_id == job_id, JobItem.mos.is_not(None), JobItem.image.is_not(None)
                )
                .order_by(JobItem.id)
            ).all(),
        )
    raw: list[float] = []
    mos: list[float] = []
    skipped = 0
    for image, reference, value in items:
        if spec.is_full_reference and not reference:
            skipped += 1
            continue
        try:
            result = registry.execute_tool(spec.name, image, reference, allow_fallback=False)
        except ToolError:
            skipped += 1
            continue
        raw.append(result.raw_score)
        mos.append(float(value))
    if len(raw) < 5:
        raise ValueError(f"{spec.name}: only {len(raw)} items with MOS and a score; need 5")
    low, high = mos_range or (min(mos), max(mos))
    if not high > low:
        raise ValueError(f"MOS range {low}..{high} is empty")
    target = np.clip(1.0 + 4.0 * (np.array(mos) - low) / (high - low), 1.0, 5.0)
    form, params, fallback = fit_monotone(
        raw, target.tolist(), lower_is_better=spec.lower_is_better
    )
    fitted = np.array([normalize(x, form, params) for x in raw])
    before = np.array([spec.normalize(x) for x in raw])
    path = output or Path(f"calibration-{spec.name}.json")
    source = (
        f"fitted by agentic-iqa calibrate on job {job_id} ({len(raw)} items, MOS "
        f"{low:g}..{high:g} mapped linearly onto 1-5)"
        + (f"; {form}, not logistic5: {fallback}" if fallback else "")
    )
    path.write_text(
        json.dumps(
            {
                "tools": {
                    spec.name: {"normalization": {"form": form, "params": params, "source": source}}
                }
            },
            indent=2,
        )
        + "\n"
    )
    return CalibrationResult(
        tool=spec.name,
        params=params,
        items=len(raw),
        skipped=skipped,
        mos_range=(low, high),
        form=form,
        fallback=fallback,
        rmse_before=float(math.sqrt(np.mean((before - target) ** 2))),
        rmse_after=float(math.sqrt(np.mean((fitted - target) ** 2))),
        srcc=float(spearmanr(raw, mos).statistic),
        path=path,
    )
