"""Optional API keys and who a client is.

With RELAYCC_API_KEYS set, every route but the health checks needs `Authorization: Bearer
<key>`; a missing or unknown key is a 401 problem. A client is identified by its key (a digest
of it, never the key itself) or, on an open service, by its IP address; the per-client job
limit counts by this identity.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.problems import ProblemError
from service.settings import SettingsDep

_bearer = HTTPBearer(
    auto_error=False,
    description="Required when the service is started with RELAYCC_API_KEYS.",
)


def client_identity(
    request: Request,
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    if settings.api_keys:
        key = credentials.credentials if credentials is not None else None
        if key is None or not any(hmac.compare_digest(key.encode(), k.encode()) for k in settings.api_keys):
            raise ProblemError.of(
                "unauthorized",
                "this service needs an API key: send `Authorization: Bearer <key>`",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return "key:" + hashlib.sha256(key.encode()).hexdigest()[:16]
    host = request.client.host if request.client is not None else "unknown"
    return f"ip:{host}"


ClientDep = Annotated[str, Depends(client_identity)]
