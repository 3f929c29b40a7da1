"""Optional API keys and who a client is.

With RELAYCC_API_KEYS set, every route but the health checks needs `Authorization: Bearer
<key>`; a missing or unknown key is a 401 problem. A client is identified by its key (a digest
of it, never the key itself) or, on an open service, by its IP address; the per-client job
limit counts by this identity.

The IP address is the connection's peer. X-Forwarded-For is believed only from a peer in
RELAYCC_TRUSTED_PROXIES (anyone can send the header; only a proxy of ours appends the truth),
so rotating the header does not make a client someone new. `relaycc serve` turns off
uvicorn's own proxy-header handling, which would otherwise rewrite the peer before we see it.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
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
    peer = request.client.host if request.client is not None else "unknown"
    return "ip:" + client_address(peer, request.headers.getlist("x-forwarded-for"), settings.trusted_proxies)


def client_address(peer: str, forwarded_for: list[str], trusted_proxies: tuple[str, ...]) -> str:
    """The address a client is counted by: the peer of the connection, unless the peer is a
    trusted proxy; then the right-most X-Forwarded-For address that is not itself a trusted
    proxy (each proxy appends the address it saw, so addresses left of it are the client's own
    word and may be anything)."""
    networks = [ipaddress.ip_network(network) for network in trusted_proxies]
    if not networks or not _is_trusted(peer, networks):
        return peer
    hops = [hop.strip() for header in forwarded_for for hop in header.split(",")]
    for hop in reversed(hops):
        if not hop:
            continue
        if not _is_trusted(hop, networks):
            return _address_or_none(hop) or peer
    # Every hop is a trusted proxy (or there is no header): the request came from the proxies.
    return peer


def _is_trusted(address: str, networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> bool:
    parsed = _address_or_none(address)
    return parsed is not None and any(ipaddress.ip_address(parsed) in network for network in networks)


def _address_or_none(text: str) -> str | None:
    """`text` as a normal IP address, or None when it is not one (a proxy that writes garbage
    does not get to name an identity)."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


ClientDep = Annotated[str, Depends(client_identity)]
