"""``/docs`` (Swagger UI 5) and ``/redoc`` served entirely by the service, with no CDN.

Swagger UI's assets come from the ``swagger-ui-bundle-v2`` package (module ``swagger_ui_bundle``),
ReDoc's standalone bundle from the ``fastapi-offline`` package; both are mounted under ``/static``.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

SWAGGER_STATIC = "/static/swagger-ui"
REDOC_STATIC = "/static/redoc"


def swagger_ui_dir() -> Path:
    import swagger_ui_bundle

    return Path(str(swagger_ui_bundle.swagger_ui_path))


def redoc_dir() -> Path:
    import fastapi_offline

    return Path(fastapi_offline.__file__).parent / "static"


def install_docs(app: FastAPI) -> None:
    app.mount(SWAGGER_STATIC, StaticFiles(directory=swagger_ui_dir()), name="swagger-ui")
    app.mount(REDOC_STATIC, StaticFiles(directory=redoc_dir()), name="redoc")
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui_html() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} — API explorer",
            swagger_js_url=f"{SWAGGER_STATIC}/swagger-ui-bundle.js",
            swagger_css_url=f"{SWAGGER_STATIC}/swagger-ui.css",
            swagger_favicon_url=f"{SWAGGER_STATIC}/favicon-32x32.png",
            oauth2_redirect_url="/docs/oauth2-redirect",
            swagger_ui_parameters={"persistAuthorization": True, "displayRequestDuration": True},
        )

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc_html() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} — API reference",
            redoc_js_url=f"{REDOC_STATIC}/redoc.standalone.js",
            redoc_favicon_url=f"{REDOC_STATIC}/favicon.png",
            with_google_fonts=False,
        )
