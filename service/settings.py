"""The service's options, read from RELAYCC_* environment variables.

Settings are built on first use, never at import time, and reached through `get_settings`, so a
test can hand the app its own with `app.dependency_overrides[get_settings]`.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated

from fastapi import Depends
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _cpu_count() -> int:
    return os.cpu_count() or 1


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RELAYCC_")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    # Processes that compile models; the HTTP server itself is one process.
    workers: int = Field(default_factory=_cpu_count, ge=1)
    # Where built modules and their artifacts are kept, keyed by module id.
    store: Path = Path(".relaycc-store")


@lru_cache
def get_settings() -> Settings:
    return Settings()


SettingsDep = Annotated[Settings, Depends(get_settings)]
