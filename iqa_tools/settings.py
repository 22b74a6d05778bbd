"""Settings of the tool layer, from the environment (prefix ``AGENTIC_IQA_``) or a YAML file.

The product's ``configs/tools.yaml`` holds the defaults a user edits; the environment overrides
it (``AGENTIC_IQA_DEVICE=cuda``, ``AGENTIC_IQA_WEIGHTS_DIR=/models/pyiqa``,
``AGENTIC_IQA_TOOL_CACHE=redis://cache:6379/2``, ``AGENTIC_IQA_TOOL_MEMORY=4GB``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from .memory import DEFAULT_TOOL_MEMORY, parse_bytes
from .secret_env import SecretFileSource, file_set_fields, with_redis_password


def default_cache_url() -> str:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return f"sqlite:///{base / 'agentic-iqa' / 'tool-scores.sqlite3'}"


class ToolSettings(BaseSettings):
    """Where tools run, where weights are, where scores are cached, what replaces a failure."""

    model_config = SettingsConfigDict(env_prefix="AGENTIC_IQA_", extra="ignore")
    #: May hold a password: also read from ``AGENTIC_IQA_TOOL_CACHE_FILE`` (see secret_env).
    SECRET_FIELDS: ClassVar[tuple[str, ...]] = ("tool_cache",)

    device: Literal["auto", "cpu", "cuda"] = "auto"
    weights_dir: Path | None = Field(
        default=None,
        description="extra folder searched for weight files before pyiqa's own cache",
    )
    allow_downloads: bool = Field(
        default=False,
        description="let pyiqa fetch missing weights from the network; off, a missing file is "
        "reported at once and Hugging Face look-ups run offline",
    )
    tool_cache: str = Field(default_factory=default_cache_url)
    memory_cache_entries: int = Field(default=4096, ge=1)
    fallback_chain: list[str] = Field(default_factory=lambda: ["BRISQUE", "NIQE"])
    metadata_path: Path | None = None
    metadata_overrides: list[Path] = Field(default_factory=list)
    torch_threads: int | None = Field(
        default=None,
        ge=1,
        description="CPU threads torch may use in this process (None: torch's default, one per "
        "core). Several tool processes on one machine each default to every core, and their "
        "OpenMP threads then spin against each other: give each cores / processes",
    )

    tile_above_pixels: int = Field(
        default=1_000_000,
        ge=0,
        description="BRISQUE, NIQE, PIQE, SSIM and PSNR score an image with more pixels than this "
        "tile by tile (iqa_tools.tiling): the same score in the memory of one tile, and from "
        "about 1 MP no slower on a CPU; smaller images keep whole-image (and batched) passes",
    )
    tile_size: int | None = Field(
        default=None,
        ge=16,
        description="side of a tile in pixels (rounded down to whole 96x96 patches for NIQE "
        "and 16x16 blocks for PIQE); memory per tool call grows with its square. None: "
        "iqa_tools.tiling.DEFAULT_TILE for the device",
    )

    tool_memory: int = Field(
        default=DEFAULT_TOOL_MEMORY,
        gt=0,
        description="bytes one tool call may use (e.g. 1.5GB, 800MB, 2GiB), estimated from the "
        "image's header before any work (iqa_tools.memory); a larger call fails as too large, "
        "naming the tool, the estimate and this setting. The default takes BRISQUE, NIQE and "
        "PIQE up to the decode ceiling (179 MP)",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Read ``tool_cache`` from ``AGENTIC_IQA_TOOL_CACHE_FILE`` too."""
        secret_files = SecretFileSource(settings_cls, cls.SECRET_FIELDS)
        return init_settings, secret_files, env_settings, dotenv_settings, file_secret_settings

    @field_validator("tool_cache", mode="after")
    @classmethod
    def _redis_password(cls, value: str) -> str:
        """Put ``AGENTIC_IQA_REDIS_PASSWORD`` into a Redis cache URL that has no password."""
        return with_redis_password(value) or value

    @field_validator("tool_memory", mode="before")
    @classmethod
    def _bytes(cls, value: Any) -> int:
        return parse_bytes(value)

    @field_validator("weights_dir", "metadata_path", mode="after")
    @classmethod
    def _expand(cls, value: Path | None) -> Path | None:
        return None if value is None else value.expanduser()

    @classmethod
    def from_yaml(cls, path: str | Path | None, **overrides: Any) -> ToolSettings:
        """Settings from a YAML file's ``tools`` section; environment variables still win."""
        values: dict[str, Any] = {}
        if path is not None and Path(path).exists():
            document: dict[str, Any] = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
            values = dict(document.get("tools", document))
        env_set = {name for name in cls.model_fields if f"AGENTIC_IQA_{name.upper()}" in os.environ}
        env_set |= file_set_fields("AGENTIC_IQA_", cls.SECRET_FIELDS)
        values = {k: v for k, v in values.items() if k not in env_set}
        values.update(overrides)
        return cls(**values)
