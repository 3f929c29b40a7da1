"""Stored status records as the response models the API shows."""

from __future__ import annotations

from datetime import datetime, timezone

from service.api.schemas import ArtifactInfo, ArtifactList, ModuleLinks, ModuleStatus, Timings
from service.store.module_store import Status


def module_path(module_id: str) -> str:
    return f"/modules/{module_id}"


def module_status(status: Status) -> ModuleStatus:
    mid = str(status["id"])
    timings = status.get("timings")
    timings = dict(timings) if isinstance(timings, dict) else {}
    queued_at, started_at = status.get("queued_at"), status.get("started_at")
    if isinstance(queued_at, float) and isinstance(started_at, float) and started_at >= queued_at:
        timings["queued_seconds"] = started_at - queued_at
    progress = status.get("progress")
    error = status.get("error")
    base = module_path(mid)
    return ModuleStatus.model_validate({
        "id": mid,
        "state": status["state"],
        # Checked by the store (service/store/module_store.py checked_status); null only in records not
        # written by the API.
        "module_name": status["module_name"] or "",
        "target": status["target"] or "",
        "compiler_version": status["compiler_version"] or "",
        "created_at": _time(status["created_at"]),
        "started_at": _time(status.get("started_at")),
        "finished_at": _time(status.get("finished_at")),
        "attempts": status["attempts"],
        "progress": progress if isinstance(progress, dict) else None,
        "timings": {k: v for k, v in timings.items() if k in Timings.model_fields},
        "error": error if isinstance(error, dict) else None,
        "links": ModuleLinks(self=base, metadata=f"{base}/metadata", artifacts=f"{base}/artifacts", run=f"{base}/run"),
    })


def artifact_list(status: Status) -> ArtifactList:
    mid = str(status["id"])
    entries = status.get("artifacts")
    return ArtifactList(
        module_id=mid,
        artifacts=[
            ArtifactInfo(**entry, href=f"{module_path(mid)}/artifacts/{entry['name']}")
            for entry in (entries if isinstance(entries, list) else [])
        ],
    )


def _time(value: object) -> datetime | None:
    if not isinstance(value, (int, float)):
        return None
    return datetime.fromtimestamp(value, tz=timezone.utc)
