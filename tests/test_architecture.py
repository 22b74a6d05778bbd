"""The import graph stays as designed: the contracts in pyproject.toml (layers from the command
line down to the tool catalogue; the domain free of Celery and SQL) and no circle anywhere."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

from tests.conftest import REPO


def test_the_import_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--config", str(REPO / "pyproject.toml")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "2 kept, 0 broken" in result.stdout


def test_no_module_imports_itself_round_a_circle():
    graph = grimp.build_graph("agentic_iqa", "workers", "iqa_tools")
    circles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            if graph.chain_exists(imported=module, importer=imported):
                circles.append((module, imported))
    assert circles == []
