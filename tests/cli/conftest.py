"""Helpers shared by the command-line tests, which run the CLI in process (typer's runner) or as
a subprocess and read what it prints."""

from __future__ import annotations

import csv
import io


def csv_rows(text: str) -> list[dict[str, str]]:
    """Return the rows of CSV ``text`` (a command's stdout) as dicts keyed by the header."""
    return list(csv.DictReader(io.StringIO(text)))
