"""The console as a Starlette application: :func:`create_app` wires the pages, the JSON API, the sampler.

Starlette (with uvicorn serving it and Jinja2 writing the HTML) because it is small (a
handful of packages, no data-validation layer an HTML console would not use), well kept,
and fits rill's blocking clients: a route written as a plain function runs in a worker
thread, and its ``TestClient`` drives the whole application in-process for tests.

What every response gets:

- HTML written by Jinja2 with autoescaping on for every template (topic names, message
  values, errors: everything is escaped), from ``templates/``; ``static/`` holds the
  stylesheet and the one script (re-fetching a page's live part). Nothing is fetched
  from anywhere else, and the Content-Security-Policy header says so to the browser.
- A Host check: a console listening on a loopback address answers only requests for
  ``localhost``, ``127.0.0.1`` or ``[::1]`` (and the host it listens on), so a web page
  elsewhere cannot reach it by pointing its own name at 127.0.0.1 (DNS rebinding).

The sampler (rill.client.console.lag_sampler) runs from the application's start-up to
its shutdown (Starlette's lifespan).
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rill.client.console.cluster_access import ClusterAccess
from rill.client.console.console_errors import Problem, problem_of
from rill.client.console.console_format import FILTERS
from rill.client.console.lag_chart import span_text
from rill.client.console.lag_sampler import LagSampler
from rill.client.console.rewind_flow import RewindFlow

__all__ = ["Console", "ConsoleSettings", "allowed_hosts", "create_app"]

HERE = Path(__file__).resolve().parent
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


@dataclass(frozen=True)
class ConsoleSettings:
    """How often the sampler samples and pages refresh (seconds), how long samples are kept (seconds), the bootstrap
    addresses shown in the header, and the Host names the console answers (``("*",)``: any)."""

    refresh_seconds: float = 2.0
    lag_window_seconds: float = 600.0
    bootstrap: str = ""
    hosts: tuple[str, ...] = LOOPBACK_NAMES


def allowed_hosts(listen_host: str) -> tuple[str, ...]:
    """The Host names to answer when listening on ``listen_host``: the loopback names (and it) for a loopback
    address or ``localhost``; any (``*``) otherwise, the console then being meant for other machines."""
    try:
        loopback = listen_host == "localhost" or ipaddress.ip_address(listen_host.strip("[]")).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        return ("*",)
    return tuple(dict.fromkeys((*LOOPBACK_NAMES, listen_host)))


class Console:
    """What the routes share: the cluster, the sampler, the rewind flow, the templates and the settings."""

    def __init__(self, access: ClusterAccess, settings: ConsoleSettings,
                 sampler: LagSampler | None = None, rewind: RewindFlow | None = None) -> None:
        self.access = access
        self.settings = settings
        self.sampler = sampler or LagSampler(access, settings.refresh_seconds, settings.lag_window_seconds)
        self.rewind = rewind or RewindFlow(access)
        self.templates = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                                            undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        self.templates.filters.update(FILTERS, span=span_text)

    def html(self, request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        """``template`` rendered with ``context`` and what every page shows (sampler status, refresh period)."""
        context.setdefault("problem", None)
        context.setdefault("page", "")
        body = self.templates.get_template(template).render(
            request=request, settings=self.settings, sampler=self.sampler.status(), now=time.time(), **context)
        return HTMLResponse(body, status_code=status)

    def page(self, request: Request, name: str, build: Callable[[], Any], **context: Any) -> HTMLResponse:
        """The page ``name`` (``name.html``, or its live part ``name_live.html`` for ``?part=live``) of the view
        ``build()`` makes; a failure is shown on the page (:func:`problem_of`) with its status."""
        try:
            view, problem = build(), None
        except Exception as exc:  # noqa: BLE001 - every failure becomes a sentence on the page
            view, problem = None, problem_of(exc)
        template = f"{name}_live.html" if request.query_params.get("part") == "live" else f"{name}.html"
        return self.html(request, template, problem.status if problem else 200, view=view, problem=problem,
                         page=name, **context)


def to_json(value: Any) -> Any:
    """A view (dataclasses, tuples, NamedTuples) as JSON-ready data."""
    if is_dataclass(value) and not isinstance(value, type):
        return {k: to_json(v) for k, v in asdict(value).items()}
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def json_response(build: Callable[[], Any]) -> Response:
    """``build()`` as JSON, or ``{"error": {"kind", "message"}}`` with the problem's status."""
    try:
        data = build()
    except Exception as exc:  # noqa: BLE001 - every failure becomes an error object
        problem: Problem = problem_of(exc)
        return JSONResponse({"error": problem.as_json()}, status_code=problem.status)
    return Response(json.dumps(to_json(data), allow_nan=False), media_type="application/json")


class SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` to every HTTP response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)


def create_app(access: ClusterAccess, settings: ConsoleSettings, *, console: Console | None = None) -> Starlette:
    """The console's ASGI application over ``access``; the sampler starts and stops with it (lifespan)."""
    from rill.client.console.console_api import API_ROUTES
    from rill.client.console.console_pages import PAGE_ROUTES

    shared = console or Console(access, settings)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        shared.sampler.start()
        try:
            yield
        finally:
            await run_in_threadpool(shared.sampler.stop)
            await run_in_threadpool(shared.access.close)

    routes: Sequence[Route | Mount] = [*PAGE_ROUTES, *API_ROUTES,
                                       Mount("/static", StaticFiles(directory=HERE / "static"), name="static")]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=list(settings.hosts)), Middleware(SecurityHeaders)]
    app = Starlette(routes=list(routes), middleware=middleware, lifespan=lifespan)
    app.state.console = shared
    return app
