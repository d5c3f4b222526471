"""Who is looking at the dashboard.

With ``KAIROS_API_KEYS`` set the dashboard needs a key, like the API: from ``Authorization:
Bearer``, from the ``kairos_ui_key`` cookie the login form sets, or once from ``?key=`` (which
sets the cookie and redirects to the same page without the key in its address). Without keys
configured everyone is the ``default`` tenant. Each tenant sees only its own clusters.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlencode

from fastapi import Request

from app.api.deps import tenant_for_key
from app.settings import DEFAULT_TENANT

COOKIE = "kairos_ui_key"
COOKIE_PATH = "/ui"


class LoginRequired(Exception):  # noqa: N818 - a control-flow signal, not an error
    """No usable key: the caller is sent to the login form."""

    def __init__(self, *, bad_key: bool) -> None:
        super().__init__("login required")
        self.bad_key = bad_key


def presented_key(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.query_params.get("key") or request.cookies.get(COOKIE) or None


def resolve_ui_tenant(request: Request) -> str:
    keys: Mapping[str, str] = request.app.state.api_keys
    if not keys:
        return DEFAULT_TENANT
    key = presented_key(request)
    tenant = tenant_for_key(keys, key)
    if tenant is None:
        raise LoginRequired(bad_key=key is not None)
    return tenant


def auth_enabled(request: Request) -> bool:
    return bool(request.app.state.api_keys)


def url_without_key(request: Request) -> str:
    params = [(k, v) for k, v in request.query_params.multi_items() if k != "key"]
    return request.url.path + (f"?{urlencode(params)}" if params else "")


def is_safe_next(target: str) -> bool:
    """Only redirect to dashboard pages (no open redirect)."""
    return target.startswith("/ui") and not target.startswith("//") and "\\" not in target
