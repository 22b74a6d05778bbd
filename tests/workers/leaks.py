"""Secrets for tests that look for them where they must not be: made awkward, found quoted too."""

from __future__ import annotations

import uuid
from urllib.parse import quote

#: Characters a URL must quote, in every password: a password is put into URLs correctly or not.
AWKWARD = "@:/%#?"


def secret(tag: str) -> str:
    """Return a fresh password holding every character a URL must quote."""
    return f"{tag}-{AWKWARD}-{uuid.uuid4().hex[:10]}"


def leaks(text: str, secrets: dict[str, str]) -> list[str]:
    """Return the names of the ``secrets`` found in ``text``, as given or URL-quoted."""
    return [
        name for name, value in secrets.items() if value in text or quote(value, safe="") in text
    ]
