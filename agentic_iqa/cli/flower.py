"""``agentic-iqa flower``: Flower, Celery's web monitor, for the pipeline's workers, never open.

Flower shows every task's arguments and each worker's configuration, and can stop workers, so
it starts only behind basic auth: the credentials (``user:password``, one per line) come from a
file (``--auth-file`` or ``AGENTIC_IQA_FLOWER_AUTH_FILE``, a Docker secret in the stack) or from
``FLOWER_BASIC_AUTH``, and are handed to Flower inside this process, never on a command line.
It listens on 127.0.0.1 unless ``--address`` says otherwise; ``/healthcheck`` answers without
credentials (it says only "OK").
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from .common import fail

AUTH_FILE_VARIABLE = "AGENTIC_IQA_FLOWER_AUTH_FILE"
#: Flower's own variable for its ``--basic-auth``: ``user:password[,user:password...]``.
FLOWER_AUTH_VARIABLE = "FLOWER_BASIC_AUTH"
NO_CREDENTIALS = (
    "agentic-iqa flower: no credentials, so Flower does not start (it shows every task and can "
    f"stop workers): give --auth-file PATH or {AUTH_FILE_VARIABLE} (a file holding "
    f"user:password), or {FLOWER_AUTH_VARIABLE}=user:password"
)


def flower_credentials(auth_file: Path | None, environ: dict[str, str] | None = None) -> list[str]:
    """Return the ``user:password`` entries Flower is to accept; exit 2 with one line if none.

    From ``auth_file`` (one entry per line, blank lines ignored), else ``FLOWER_BASIC_AUTH``
    (comma-separated).  Both given is an error; no error line ever quotes an entry.
    """
    env = dict(os.environ) if environ is None else environ
    from_env = env.get(FLOWER_AUTH_VARIABLE, "").strip()
    if auth_file is not None:
        if from_env:
            fail(
                f"agentic-iqa flower: --auth-file ({AUTH_FILE_VARIABLE}) and "
                f"{FLOWER_AUTH_VARIABLE} are both set: keep one",
                code=2,
            )
        where = f"--auth-file {auth_file}"
        try:
            text = auth_file.expanduser().read_text(encoding="utf-8")
        except FileNotFoundError:
            fail(f"agentic-iqa flower: {where}: no such file", code=2)
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or type(exc).__name__
            fail(f"agentic-iqa flower: {where}: cannot read it ({reason})", code=2)
        entries = [line.strip() for line in text.splitlines()]
    elif from_env:
        where = FLOWER_AUTH_VARIABLE
        entries = [entry.strip() for entry in from_env.split(",")]
    else:
        fail(NO_CREDENTIALS, code=2)
    numbered = [(number, entry) for number, entry in enumerate(entries, 1) if entry]
    if not numbered:
        fail(f"agentic-iqa flower: {where} holds no credentials; write user:password in it", code=2)
    for number, entry in numbered:
        user, colon, password = entry.partition(":")
        if not (user and colon and password):
            fail(
                f"agentic-iqa flower: {where}: entry {number} is not user:password "
                "(a user, a colon, a password)",
                code=2,
            )
    return [entry for _, entry in numbered]


def flower(
    address: Annotated[
        str,
        typer.Option(
            "--address",
            help="interface to listen on; the default, 127.0.0.1, is this machine only (0.0.0.0 "
            "in a container, behind its published port)",
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535)] = 5555,
    auth_file: Annotated[
        Path | None,
        typer.Option(
            "--auth-file",
            envvar=AUTH_FILE_VARIABLE,
            help="file holding user:password (one per line); or set FLOWER_BASIC_AUTH",
            show_envvar=True,
        ),
    ] = None,
) -> None:
    """Start Flower, the web monitor of the workers, behind basic auth (same as `celery -A
    workers.celery_app:app flower`, but it refuses to start without credentials and keeps them
    off its command line)."""
    credentials = flower_credentials(auth_file)
    from flower import options as _defined  # noqa: F401 - defines Flower's options
    from tornado.options import options

    from ..redact import register_secret

    for entry in credentials:
        register_secret(entry.partition(":")[2])
    # Read by Flower's own command from here, as its --basic-auth would be; FLOWER_BASIC_AUTH,
    # when that is the source, is read by it again and says the same.
    options.basic_auth = credentials
    from workers.celery_app import app as celery_app

    celery_app.start(["flower", f"--address={address}", f"--port={port}"])
