"""Dashboard routes under ``/ui`` (HTML; not part of the OpenAPI document)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from app.api.deps import tenant_for_key
from app.db.session import Database
from app.schemas.cluster import ClusterRead
from app.schemas.decision import DecisionRead
from app.services import clusters as cluster_service
from app.services import dags as dag_service
from app.services import decisions as decision_service
from app.services import jobs as job_service
from app.services import nodes as node_service
from app.services import policies as policy_service
from app.services import shadow as shadow_service
from app.services import tunes as tune_service
from app.services.context import Ctx
from app.services.decision import DecisionService
from app.services.errors import ServiceError
from app.ui import dag_graph, views
from app.ui.auth import (
    COOKIE,
    COOKIE_PATH,
    LEGACY_COOKIE,
    SESSION_TTL_S,
    LoginRequired,
    auth_enabled,
    is_safe_next,
    new_session_token,
    resolve_ui_tenant,
    secret_params,
    url_without_secrets,
)
from app.ui.settings import UISettings, get_ui_settings

PACKAGE_DIR = Path(__file__).resolve().parent
STATIC_DIR = PACKAGE_DIR / "static"
STATIC_FILES = frozenset({"dashboard.css"})
#: the paged tables of a cluster's page (query parameter names of their cursors)
CLUSTER_TABLES = ("nodes", "queue", "running", "decisions")
#: how many of the newest decisions the charts of a cluster's page draw
CHART_DECISIONS = 100
BAD_KEY = "That key is not valid."

router = APIRouter(prefix="/ui", include_in_schema=False)


@lru_cache
def templates() -> Jinja2Templates:
    env = Jinja2Templates(directory=str(PACKAGE_DIR / "templates"))
    env.env.filters["ts"] = views.format_time
    env.env.filters["amount"] = views.format_amount
    env.env.filters["resources"] = views.format_resources
    env.env.filters["about"] = views.policy_about
    return env


def _render(
    request: Request, name: str, context: dict[str, Any], status_code: int = 200
) -> HTMLResponse:
    base = {"auth_enabled": auth_enabled(request), "refresh": _refresh(request)}
    response = templates().TemplateResponse(
        request, name, {**base, **context}, status_code=status_code
    )
    response.headers["Cache-Control"] = "no-store"
    return response


def _refresh(request: Request) -> int | None:
    raw = request.query_params.get("refresh", "")
    return min(max(int(raw), 2), 3600) if raw.isdigit() and int(raw) > 0 else None


def _enter(request: Request) -> str | Response:
    """The caller's tenant, or the response that gets them one (login form, or the refusal of
    an address that carries a secret)."""
    refused = _refuse_secret_in_url(request)
    if refused is not None:
        return refused
    try:
        return resolve_ui_tenant(request)
    except LoginRequired as exc:
        target = url_without_secrets(request)
        if exc.bad_key:
            return _render(request, "login.html", {"next": target, "error": BAD_KEY}, 401)
        return RedirectResponse(f"/ui/login?{urlencode({'next': target})}", status_code=303)


def _refuse_secret_in_url(request: Request) -> Response | None:
    """A 400 page pointing to the login form if the address carries a secret-looking query
    parameter (``?key=``): the key is neither used nor put in a cookie."""
    names = secret_params(request)
    if not names:
        return None
    login = f"/ui/login?{urlencode({'next': url_without_secrets(request)})}"
    return _render(request, "secret_in_url.html", {"names": names, "login": login}, 400)


def _set_session_cookie(request: Request, response: Response, key: str) -> None:
    response.set_cookie(
        COOKIE,
        new_session_token(key),
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        max_age=SESSION_TTL_S,
    )
    response.delete_cookie(LEGACY_COOKIE, path=COOKIE_PATH)


def _database(request: Request) -> Database:
    database: Database = request.app.state.database
    return database


def _decision_service(request: Request) -> DecisionService:
    service: DecisionService = request.app.state.decisions
    return service


def _error(request: Request, exc: ServiceError, tenant: str) -> HTMLResponse:
    return _render(
        request,
        "error.html",
        {"status": exc.status_code, "message": exc.message, "tenant": tenant},
        status_code=exc.status_code,
    )


def _cluster_view(cluster: ClusterRead) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "usage": views.usage(cluster.capacity, cluster.allocated, cluster.resources),
    }


UISettingsDep = Annotated[UISettings, Depends(get_ui_settings)]


@router.get("", response_class=HTMLResponse)
@router.get("/", response_class=HTMLResponse)
async def overview(request: Request, ui: UISettingsDep) -> Response:
    """Clusters with utilisation, shadow agreement, policies, evaluation plots."""
    entered = _enter(request)
    if isinstance(entered, Response):
        return entered
    query = dict(request.query_params)
    cursor, _ = views.page_state(query, "clusters")
    try:
        async with _database(request).transaction(write=False) as session:
            ctx = Ctx(session=session, tenant=entered)
            page = await cluster_service.list_clusters(ctx, limit=ui.UI_ROWS, cursor=cursor)
            shadows = [
                await shadow_service.shadow_report(ctx, cluster.id)
                for cluster in page.items
                if cluster.shadow_policy
            ]
    except ServiceError as exc:
        return _error(request, exc, entered)
    reports_dir = Path(ui.REPORTS_DIR)
    return _render(
        request,
        "overview.html",
        {
            "tenant": entered,
            "clusters": [_cluster_view(c) for c in page.items],
            "clusters_pages": views.page_links("/ui", query, "clusters", page.next_cursor),
            "shadows": shadows,
            "policies": policy_service.list_policies(_decision_service(request), entered),
            "reports": views.report_files(reports_dir),
            "reports_dir": str(reports_dir),
        },
    )


@router.get("/clusters/{cluster_id}", response_class=HTMLResponse)
async def cluster_page(request: Request, cluster_id: str, ui: UISettingsDep) -> Response:
    """One cluster: nodes with utilisation, the queue, running jobs, recent decisions."""
    entered = _enter(request)
    if isinstance(entered, Response):
        return entered
    query = dict(request.query_params)
    cursors = {name: views.page_state(query, name)[0] for name in CLUSTER_TABLES}
    try:
        async with _database(request).transaction(write=False) as session:
            ctx = Ctx(session=session, tenant=entered)
            cluster = await cluster_service.get_cluster(ctx, cluster_id)
            nodes = await node_service.list_nodes(
                ctx, cluster_id, limit=ui.UI_ROWS, cursor=cursors["nodes"]
            )
            pending = await job_service.list_jobs(
                ctx, cluster_id, state="pending", limit=ui.UI_ROWS, cursor=cursors["queue"]
            )
            running = await job_service.list_jobs(
                ctx, cluster_id, state="running", limit=ui.UI_ROWS, cursor=cursors["running"]
            )
            decisions = await decision_service.list_decisions(
                ctx, cluster_id, limit=ui.UI_ROWS, cursor=cursors["decisions"]
            )
            shadow_report = await shadow_service.shadow_report(ctx, cluster_id)
            history = await decision_service.recent_details(ctx, cluster_id, limit=CHART_DECISIONS)
        tunes = await tune_service.list_tunes(
            _database(request), entered, cluster_id, limit=ui.UI_ROWS, cursor=None
        )
    except ServiceError as exc:
        return _error(request, exc, entered)
    size = cluster.resources[0] if cluster.resources else "cpu"
    path = f"/ui/clusters/{quote(cluster_id, safe='')}"
    nexts = {
        "nodes": nodes.next_cursor,
        "queue": pending.next_cursor,
        "running": running.next_cursor,
        "decisions": decisions.next_cursor,
    }
    return _render(
        request,
        "gpu_cluster.html" if cluster.domain == "gpu" else "cluster.html",
        {
            "tenant": entered,
            **_cluster_view(cluster),
            "nodes": [
                {"node": n, "usage": views.usage(n.capacity, n.allocated, cluster.resources)}
                for n in nodes.items
            ],
            "pending": pending.items,
            "running": running.items,
            "decisions": [_decision_row(d) for d in decisions.items],
            "pages": {
                name: views.page_links(path, query, name, nexts[name]) for name in CLUSTER_TABLES
            },
            "shadow": views.shadow_agreement(decisions.items),
            "shadow_report": shadow_report,
            "rows": ui.UI_ROWS,
            "charts": views.log_charts(views.log_points(history, size)),
            "chart_decisions": len(history),
            "size_resource": size,
            "tunes": tunes.items,
        },
    )


@router.get("/clusters/{cluster_id}/dags", response_class=HTMLResponse)
async def dags_page(request: Request, cluster_id: str, ui: UISettingsDep) -> Response:
    """A dag cluster's DAGs with their state and progress."""
    entered = _enter(request)
    if isinstance(entered, Response):
        return entered
    query = dict(request.query_params)
    cursor, _ = views.page_state(query, "dags")
    try:
        async with _database(request).transaction(write=False) as session:
            ctx = Ctx(session=session, tenant=entered)
            cluster = await cluster_service.get_cluster(ctx, cluster_id)
            page = await dag_service.list_dags(
                ctx, cluster_id, state=None, limit=ui.UI_ROWS, cursor=cursor
            )
    except ServiceError as exc:
        return _error(request, exc, entered)
    path = f"/ui/clusters/{quote(cluster_id, safe='')}/dags"
    links = views.page_links(path, query, "dags", page.next_cursor)
    return _render(
        request,
        "dags.html",
        {"tenant": entered, "cluster": cluster, "dags": page.items, "pages": links},
    )


@router.get("/clusters/{cluster_id}/dags/{dag_id}", response_class=HTMLResponse)
async def dag_page(request: Request, cluster_id: str, dag_id: str) -> Response:
    """One DAG: its stages and their progress drawn as a graph, and a table of them."""
    entered = _enter(request)
    if isinstance(entered, Response):
        return entered
    try:
        async with _database(request).transaction(write=False) as session:
            dag = await dag_service.get_dag(
                Ctx(session=session, tenant=entered), cluster_id, dag_id
            )
    except ServiceError as exc:
        return _error(request, exc, entered)
    return _render(
        request,
        "dag.html",
        {
            "tenant": entered,
            "cluster_id": cluster_id,
            "dag": dag,
            "graph": dag_graph.dag_svg(dag),
        },
    )


@router.get("/decisions/{decision_id}", response_class=HTMLResponse)
async def decision_page(request: Request, decision_id: str) -> Response:
    """One decision: its input in brief, every pending job's outcome and reason, the policy,
    the fallback and the shadow policy's choice."""
    entered = _enter(request)
    if isinstance(entered, Response):
        return entered
    try:
        async with _database(request).transaction(write=False) as session:
            decision = await decision_service.get_decision(
                Ctx(session=session, tenant=entered), decision_id
            )
    except ServiceError as exc:
        return _error(request, exc, entered)
    return _render(
        request,
        "decision.html",
        {
            "tenant": entered,
            "d": decision,
            "brief": views.decision_brief(decision),
            "jobs": views.job_outcomes(decision),
        },
    )


def _decision_row(decision: DecisionRead) -> dict[str, Any]:
    shadow_match: float | None = None
    if decision.shadow is not None:
        (agreement,) = views.shadow_agreement([decision])
        shadow_match = agreement.mean_jaccard
    return {"d": decision, "shadow_match": shadow_match}


@router.get("/login", response_class=HTMLResponse)
async def login_form(request: Request, next: str = "/ui") -> Response:
    refused = _refuse_secret_in_url(request)
    if refused is not None:
        return refused
    return _render(request, "login.html", {"next": next if is_safe_next(next) else "/ui"})


@router.post("/login", response_class=HTMLResponse)
async def login(
    request: Request,
    key: Annotated[str, Form(max_length=512)],
    next: Annotated[str, Form(max_length=2048)] = "/ui",
) -> Response:
    """The key arrives in the form's body; the answer sets a session cookie, not the key."""
    target = next if is_safe_next(next) else "/ui"
    keys = request.app.state.api_keys
    if not keys:
        return RedirectResponse(target, status_code=303)
    if tenant_for_key(keys, key.strip()) is None:
        return _render(request, "login.html", {"next": target, "error": BAD_KEY}, 401)
    response = RedirectResponse(target, status_code=303)
    _set_session_cookie(request, response, key.strip())
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    response = RedirectResponse("/ui/login", status_code=303)
    for name in (COOKIE, LEGACY_COOKIE):
        response.delete_cookie(
            name,
            path=COOKIE_PATH,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
    return response


@router.get("/static/{name}")
async def static_file(name: str) -> Response:
    if name not in STATIC_FILES:
        return Response(status_code=404)
    return FileResponse(STATIC_DIR / name, headers={"Cache-Control": "public, max-age=3600"})


@router.get("/reports/{relative:path}")
async def report_file(request: Request, relative: str, ui: UISettingsDep) -> Response:
    entered = _enter(request)
    if isinstance(entered, Response):
        return entered
    path = views.safe_report_path(Path(ui.REPORTS_DIR), relative)
    if path is None:
        return Response(status_code=404)
    return FileResponse(path)
