"""Who is looking at the dashboard.

With ``KAIROS_API_KEYS`` set the dashboard needs a key, like the API: from ``Authorization:
Bearer``, or through the login form (the key travels in a POST body), which sets the
``kairos_ui_session`` cookie. Without keys configured everyone is the ``default`` tenant. Each
tenant sees only its own clusters.

The cookie never holds the key. It holds a session token ``<expiry>.<mac>``: the expiry (Unix
seconds) and ``HMAC-SHA256(key, label | expiry)``. It is no API key (the API refuses it), it stops
working at its expiry, and every process and replica configured with the same ``KAIROS_API_KEYS``
validates it without shared state; a key taken out of ``KAIROS_API_KEYS`` ends its sessions.

A key is never accepted in a URL: addresses end up in access logs, browser history and proxies.
A dashboard address with a secret-looking query parameter (``?key=``, ``?token=``, ...) is
refused with a page that points to the login form.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Mapping
from urllib.parse import urlencode

from fastapi import Request

from app.api.deps import tenant_for_key
from app.observability import is_secret_name
from app.settings import DEFAULT_TENANT

COOKIE = "kairos_ui_session"
#: the cookie earlier versions kept the raw key in; expired at login and logout
LEGACY_COOKIE = "kairos_ui_key"
COOKIE_PATH = "/ui"
#: seconds a session token is valid for (also the cookie's max-age)
SESSION_TTL_S = 12 * 3600
_SESSION_LABEL = b"kairos-ui-session-v1|"
_MAX_EXPIRY_DIGITS = 12


class LoginRequired(Exception):  # noqa: N818 - a control-flow signal, not an error
    """No usable key or session: the caller is sent to the login form."""

    def __init__(self, *, bad_key: bool) -> None:
        super().__init__("login required")
        self.bad_key = bad_key


def session_token(key: str, expires: int) -> str:
    """The session token for ``key`` valid until ``expires`` (Unix seconds)."""
    mac = hmac.new(key.encode(), _SESSION_LABEL + str(expires).encode(), hashlib.sha256)
    return f"{expires}." + base64.urlsafe_b64encode(mac.digest()).rstrip(b"=").decode()


def new_session_token(key: str, now: float | None = None) -> str:
    return session_token(key, int(now if now is not None else time.time()) + SESSION_TTL_S)


def tenant_for_session(
    keys: Mapping[str, str], token: str | None, now: float | None = None
) -> str | None:
    """The tenant whose key signed ``token``, if it has not expired (constant-time compare
    against every key), else None."""
    if not token:
        return None
    expiry, dot, _ = token.partition(".")
    if not dot or not (expiry.isascii() and expiry.isdigit()) or len(expiry) > _MAX_EXPIRY_DIGITS:
        return None
    expires = int(expiry)
    current = now if now is not None else time.time()
    if not current < expires <= current + SESSION_TTL_S:
        return None
    found: str | None = None
    for key, tenant in keys.items():
        if hmac.compare_digest(session_token(key, expires).encode(), token.encode()):
            found = tenant
    return found


def bearer_key(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return None


def resolve_ui_tenant(request: Request) -> str:
    keys: Mapping[str, str] = request.app.state.api_keys
    if not keys:
        return DEFAULT_TENANT
    key = bearer_key(request)
    if key is not None:
        tenant = tenant_for_key(keys, key)
        if tenant is None:
            raise LoginRequired(bad_key=True)
        return tenant
    tenant = tenant_for_session(keys, request.cookies.get(COOKIE))
    if tenant is None:
        raise LoginRequired(bad_key=False)
    return tenant


def auth_enabled(request: Request) -> bool:
    return bool(request.app.state.api_keys)


def secret_params(request: Request) -> list[str]:
    """Names of the query parameters of ``request`` that look like secrets."""
    return sorted({name for name in request.query_params if is_secret_name(name)})


def url_without_secrets(request: Request) -> str:
    params = [(k, v) for k, v in request.query_params.multi_items() if not is_secret_name(k)]
    return request.url.path + (f"?{urlencode(params)}" if params else "")


def is_safe_next(target: str) -> bool:
    """Only redirect to dashboard pages (no open redirect)."""
    return target.startswith("/ui") and not target.startswith("//") and "\\" not in target
