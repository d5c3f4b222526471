"""``/docs`` (Swagger UI) served entirely by the service: assets from the ``swagger-ui-bundle``
package, mounted under ``/static/swagger-ui``; no CDN URL appears in the page."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

SWAGGER_STATIC = "/static/swagger-ui"


def swagger_ui_dir() -> Path:
    import swagger_ui_bundle

    return Path(swagger_ui_bundle.swagger_ui_path)


def install_docs(app: FastAPI) -> None:
    app.mount(SWAGGER_STATIC, StaticFiles(directory=swagger_ui_dir()), name="swagger-ui")
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
            swagger_ui_parameters={"tryItOutEnabled": False, "persistAuthorization": True},
        )

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()
