"""What figures and pages call the lines of a comparison (:mod:`.compare`): a job's name or
its ``--label``, not the id its ``label`` carries for ``--json`` and the text.

A leaf, so that the comparison's page and its figures (:mod:`.figures`) both name lines alike
without importing each other.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any


def line_names(doc: Mapping[str, Any], labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The comparison with the names figures and pages give its lines (``name``), its baseline
    (``baseline_name``) and its jobs (``shown_as``): a job's ``labels`` entry (job id ->
    ``--label``), else its name, else its short id as ``label`` has it; a metric job's line
    adds its tool unless the job has only that one and its name says it; two jobs named
    alike keep their short ids.  ``label`` (ids, for ``--json`` and the text) is unchanged."""
    labels = labels or {}
    shown = {
        str(job.get("id")): labels.get(str(job.get("id"))) or job.get("name") or None
        for job in doc["jobs"]
    }
    alike = Counter(name for name in shown.values() if name)
    tools = Counter(str(line.get("job")) for line in doc["lines"] if line.get("tool"))
    lines = []
    for line in doc["lines"]:
        job = str(line.get("job"))
        name = shown.get(job)
        if not name:
            lines.append({**line, "name": line["label"]})
            continue
        if alike[name] > 1:
            name = f"{name} ({job[:8]})"
        tool = line.get("tool")
        if tool and (tools[job] > 1 or str(tool).lower() not in name.lower()):
            name = f"{name}: {tool}"
        lines.append({**line, "name": name})
    jobs = [
        {**job, "shown_as": shown.get(str(job.get("id"))) or str(job.get("id"))[:8]}
        for job in doc["jobs"]
    ]
    baseline = next(
        (line["name"] for line in lines if line["baseline"]), doc.get("baseline") or "-"
    )
    return {**doc, "jobs": jobs, "lines": lines, "baseline_name": baseline}


def with_line_names(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    """``doc`` as :func:`line_names` names it, unless it is named already (``--label``)."""
    return doc if "baseline_name" in doc else line_names(doc)
