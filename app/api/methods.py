"""``OPTIONS``, ``HEAD`` and the ``Allow`` header, the same on every path (pure ASGI).

The router alone answers a method a path lacks with 405 and an ``Allow`` naming the methods of
the first route whose path matched (``PUT`` for ``/v1/clusters/{id}``, which also has ``GET``
and ``DELETE``), ``OPTIONS`` the same way, and ``HEAD`` with 405 on FastAPI's routes. Here, for a
path some route serves:

- ``OPTIONS`` answers 204 with ``Allow`` listing every method of the path;
- ``HEAD`` answers as ``GET`` does, without the body, where the path has ``GET``;
- every 405 carries that same ``Allow``.

A path no route serves passes through (404), as does one a mount serves (static files answer
their own methods). It is the innermost middleware (``app.main``): next to the router, after
the idempotency middleware.
"""

from __future__ import annotations

from starlette.routing import BaseRoute, Match, Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: the methods routes of this service may declare (probed to build ``Allow``)
_PROBED = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


class AllowedMethodsMiddleware:
    def __init__(self, app: ASGIApp, routes: list[BaseRoute]) -> None:
        self.app = app
        #: the application's routes (``app.router.routes``, read on each use)
        self.routes = routes

    def _route_for(self, scope: Scope, method: str) -> BaseRoute | None:
        probe = {**scope, "method": method}
        for route in self.routes:
            match, _ = route.matches(probe)
            if match == Match.FULL:
                return route
        return None

    def allowed(self, scope: Scope) -> set[str] | None:
        """The methods the router serves on this path; None when none does or a mount does."""
        methods: set[str] = set()
        for method in _PROBED:
            route = self._route_for(scope, method)
            if isinstance(route, Mount):
                return None
            if route is not None:
                methods.add(method)
        if not methods:
            return None
        methods.add("OPTIONS")
        if "GET" in methods:
            methods.add("HEAD")
        return methods

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        if method in ("OPTIONS", "HEAD") and self._route_for(scope, method) is None:
            allowed = self.allowed(scope)
            if allowed is not None and method == "OPTIONS":
                headers = [_allow_header(allowed)]
                await send({"type": "http.response.start", "status": 204, "headers": headers})
                await send({"type": "http.response.body", "body": b""})
                return
            if allowed is not None and "GET" in allowed:
                await self.app({**scope, "method": "GET"}, receive, _without_body(send))
                return
        await self.app(scope, receive, self._allow_on_405(scope, send))

    def _allow_on_405(self, scope: Scope, send: Send) -> Send:
        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 405:
                allowed = self.allowed(scope)
                if allowed is not None:
                    headers = [(k, v) for k, v in message.get("headers", []) if k != b"allow"]
                    message = {**message, "headers": [*headers, _allow_header(allowed)]}
            await send(message)

        return send_wrapper


def _allow_header(methods: set[str]) -> tuple[bytes, bytes]:
    return b"allow", ", ".join(sorted(methods)).encode()


def _without_body(send: Send) -> Send:
    """``send`` for a ``HEAD`` answered as ``GET``: the status and headers (``content-length``
    included) as ``GET`` has them, an empty body."""

    async def send_wrapper(message: Message) -> None:
        if message["type"] == "http.response.body":
            if message.get("more_body", False):
                return
            message = {"type": "http.response.body", "body": b""}
        await send(message)

    return send_wrapper
