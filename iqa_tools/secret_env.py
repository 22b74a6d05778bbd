"""Read secret settings from the environment or from files, and put passwords into URLs.

Every secret variable ``NAME`` (a URL that may hold a password, an API key) may instead be given
as ``NAME_FILE``: the path of a file whose content, without its trailing newline, is the value.
That is the form Docker secrets take (``/run/secrets/...``), so a container's environment, as
``docker inspect`` shows it, holds no secret.  Two more variables hold only a password:

* ``AGENTIC_IQA_DATABASE_PASSWORD`` (or ``_FILE``): put, URL-quoted, into the database URL when
  it has a host and no password of its own;
* ``AGENTIC_IQA_REDIS_PASSWORD`` (or ``_FILE``): put into every ``redis://`` or ``rediss://`` URL
  of ours (broker, result backend, tool cache, rate limits) that has none.

A configuration error is one line naming the variables and the path, never the file's content.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

#: The suffix of a variable that names a file holding another variable's value.
FILE_SUFFIX = "_FILE"
DATABASE_PASSWORD = "AGENTIC_IQA_DATABASE_PASSWORD"
REDIS_PASSWORD = "AGENTIC_IQA_REDIS_PASSWORD"
REDIS_SCHEMES = ("redis", "rediss")


class SecretSettingError(Exception):
    """A secret variable that cannot be read: both forms set, or a file missing or empty.

    Not a ``ValueError``: raised inside a pydantic validator, it must reach the user as its one
    line, not as a validation error of the field."""


def read_variable(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Return ``name``'s value, or the content of the file ``name_FILE`` names (None: neither).

    The file's trailing newline is dropped; an empty ``name_FILE`` counts as unset.  Raises
    :class:`SecretSettingError` when both are set, or when the file is missing, unreadable or
    empty.
    """
    env = os.environ if environ is None else environ
    file_variable = name + FILE_SUFFIX
    path_text = env.get(file_variable, "").strip()
    if not path_text:
        return env.get(name)
    if env.get(name):
        raise SecretSettingError(
            f"{name} and {file_variable} are both set: keep one (the value, or the file it is in)"
        )
    path = Path(path_text).expanduser()
    try:
        content = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SecretSettingError(
            f"{file_variable}={path}: no such file; point it at the file that holds {name}"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise SecretSettingError(
            f"{file_variable}={path}: cannot read it ({reason}); make it a readable text file"
        ) from None
    value = content.rstrip("\r\n")
    if not value.strip():
        raise SecretSettingError(f"{file_variable}={path}: the file is empty; write {name} in it")
    return value


def file_given(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Return whether ``name_FILE`` names a file (is set to something other than blanks)."""
    env = os.environ if environ is None else environ
    return bool(env.get(name + FILE_SUFFIX, "").strip())


def is_set(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Return whether ``name`` or ``name_FILE`` is set (to something other than nothing)."""
    env = os.environ if environ is None else environ
    return bool(env.get(name)) or file_given(name, env)


def with_password(url: str, password: str | None, *, schemes: tuple[str, ...] = ()) -> str:
    """Return ``url`` with ``password`` (URL-quoted) in it, unless it has one already.

    Left as it is: no password given, a URL without a host (``sqlite:///...``, ``memory://``),
    one whose scheme is not among ``schemes`` (when given), or one with a password already.
    """
    if not password:
        return url
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if not parts.hostname or (schemes and scheme not in schemes):
        return url
    userinfo, at, host = parts.netloc.rpartition("@")
    if at and ":" in userinfo:
        return url
    netloc = f"{userinfo}:{quote(password, safe='')}@{host}"
    return urlunsplit(parts._replace(netloc=netloc))


def with_redis_password(url: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """Return ``url`` with ``AGENTIC_IQA_REDIS_PASSWORD`` in it when it is a Redis URL with none."""
    if not url:
        return url
    return with_password(url, read_variable(REDIS_PASSWORD, environ), schemes=REDIS_SCHEMES)


def with_database_password(url: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """Return the database ``url`` with ``AGENTIC_IQA_DATABASE_PASSWORD`` in it when it has none."""
    if not url:
        return url
    return with_password(url, read_variable(DATABASE_PASSWORD, environ))


class SecretFileSource(PydanticBaseSettingsSource):
    """A pydantic-settings source: the fields named in ``fields`` from ``PREFIX<FIELD>_FILE``.

    Both set is an error (:func:`read_variable`); placed before the environment source, so the
    file wins over an empty ``PREFIX<FIELD>``.
    """

    def __init__(self, settings_cls: type[BaseSettings], fields: tuple[str, ...]) -> None:
        super().__init__(settings_cls)
        self.fields = fields
        self.prefix = str(settings_cls.model_config.get("env_prefix", ""))

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        """Return the field's value from its file (None when its file variable is unset)."""
        variable = (self.prefix + field_name).upper()
        if field_name not in self.fields or not file_given(variable):
            return None, field_name, False
        return read_variable(variable), field_name, False

    def __call__(self) -> dict[str, Any]:
        """Return every configured field's value read from its file."""
        values: dict[str, Any] = {}
        for name in self.fields:
            value, _, _ = self.get_field_value(self.settings_cls.model_fields[name], name)
            if value is not None:
                values[name] = value
        return values


def file_set_fields(prefix: str, fields: tuple[str, ...]) -> set[str]:
    """Return the ``fields`` given by a ``PREFIX<FIELD>_FILE`` variable."""
    return {name for name in fields if file_given(f"{prefix}{name.upper()}")}
