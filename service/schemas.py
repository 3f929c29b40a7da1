"""Bodies of the service's requests and responses."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from compiler import __version__


class HealthStatus(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"status": "ok", "version": __version__}]}
    )

    status: Literal["ok"]
    version: str
