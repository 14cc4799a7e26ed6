"""The console's HTML pages: brokers, topics, a topic, a partition's messages, groups, a group, its rewind.

Each GET page is server-rendered (templates/<page>.html) around a *live part*
(templates/<page>_live.html) that ``static/console.js`` fetches again every
``--refresh-seconds`` with ``?part=live`` and swaps in, so the figures refresh by
themselves while the forms around them stay as typed. A failure (broker down, refused
by the ACLs, no such group) is shown in the live part as one sentence, with the
matching HTTP status, and the page recovers by itself when the cause goes away.

The routes that call the cluster are plain functions: Starlette runs them in its
worker threads, as rill's clients block.
"""

from __future__ import annotations

import argparse
import time
from urllib.parse import parse_qsl

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from rill.client.cli.reset_targets import parse_datetime_ms
from rill.client.console.broker_roles import brokers_view
from rill.client.console.console_app import Console
from rill.client.console.console_errors import InvalidInput, problem_of
from rill.client.console.console_format import human_bytes, human_seconds
from rill.client.console.group_overview import GroupView, group_view, groups_view
from rill.client.console.lag_chart import Chart, line_chart
from rill.client.console.message_browser import FORMATS, MAX_COUNT, MessagePage, StartAt, browse
from rill.client.console.rewind_flow import TARGETS, PlanChanged, request_from_form
from rill.client.console.topic_overview import topic_view, topics_view

__all__ = ["PAGE_ROUTES", "browse_query", "count_from_query", "lag_charts", "start_from_query"]

DEFAULT_COUNT = 20
MAX_FORM_BYTES = 1_048_576  # a confirmation carries its plan: one offset per partition


def _console(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def brokers_page(request: Request) -> Response:
    console = _console(request)
    return console.page(request, "brokers", lambda: brokers_view(console.access))


def topics_page(request: Request) -> Response:
    console = _console(request)
    return console.page(request, "topics", lambda: topics_view(console.access, console.sampler))


def topic_page(request: Request) -> Response:
    console = _console(request)
    topic = request.path_params["topic"]
    return console.page(request, "topic", lambda: topic_view(console.access, console.sampler, topic), topic=topic)


def messages_page(request: Request) -> Response:
    """A partition's messages; the query (from, offset, time, count, format) is the form at the top of the page."""
    console = _console(request)
    topic, partition = request.path_params["topic"], request.path_params["partition"]
    form = browse_query(request)

    def build() -> MessagePage:
        return browse(console.access, topic, partition, start_from_query(form), count_from_query(form), form["format"])

    return console.page(request, "messages", build, topic=topic, partition=partition, form=form, formats=FORMATS,
                        max_count=MAX_COUNT)


def browse_query(request: Request) -> dict[str, str]:
    """The message browser's query (``from``, ``offset``, ``time``, ``count``, ``format``), defaults filled in."""
    query = request.query_params
    return {"from": query.get("from", "latest"), "offset": query.get("offset", ""), "time": query.get("time", ""),
            "count": query.get("count", str(DEFAULT_COUNT)), "format": query.get("format", "text")}


def start_from_query(form: dict[str, str]) -> StartAt:
    """Where the message browser starts, from its form's ``from``, ``offset`` and ``time`` fields.

    Raises:
        InvalidInput: a bad offset or time.
    """
    kind = form.get("from", "latest")
    if kind == "offset":
        try:
            return StartAt("offset", offset=int(form.get("offset", "")))
        except ValueError:
            raise InvalidInput(f"the offset must be a whole number (a byte position), not {form.get('offset')!r}") \
                from None
    if kind == "time":
        try:
            return StartAt("time", time_ms=parse_datetime_ms(form.get("time", "")))
        except argparse.ArgumentTypeError as exc:
            raise InvalidInput(str(exc)) from None
    return StartAt(kind)


def count_from_query(form: dict[str, str]) -> int:
    """How many messages the query asks for. Raises InvalidInput: not a whole number."""
    try:
        return int(form.get("count", ""))
    except ValueError:
        raise InvalidInput(f"count must be a whole number, not {form.get('count')!r}") from None


def groups_page(request: Request) -> Response:
    console = _console(request)
    return console.page(request, "groups", lambda: groups_view(console.access, console.sampler))


def group_page(request: Request) -> Response:
    console = _console(request)
    group = request.path_params["group"]

    def build() -> tuple[GroupView, dict[str, Chart]]:
        view = group_view(console.access, console.sampler, group)
        return view, lag_charts(view, console.sampler.window)

    return console.page(request, "group", build, group=group, targets=TARGETS)


def lag_charts(view: GroupView, window: float) -> dict[str, Chart]:
    """The group's two charts over the window: lag in bytes (all partitions) and in seconds (the oldest message)."""
    now = time.time()
    return {"bytes": line_chart([(t, p.lag_bytes) for t, p in view.history], now, window, human_bytes),
            "seconds": line_chart([(t, p.lag_seconds) for t, p in view.history], now, window, human_seconds)}


async def form_fields(request: Request) -> dict[str, str]:
    """The fields of a posted HTML form (``application/x-www-form-urlencoded``, the browsers' default), the first
    of each name; at most :data:`MAX_FORM_BYTES` are read (a longer body: no fields, so the form is refused)."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return {}
    fields: dict[str, str] = {}
    for name, value in parse_qsl(body.decode("utf-8", errors="replace"), keep_blank_values=True):
        fields.setdefault(name, value)
    return fields


async def rewind_plan(request: Request) -> HTMLResponse:
    """POST of the rewind form: the plan (a dry run), with the form confirming it."""
    console = _console(request)
    group = request.path_params["group"]
    form = await form_fields(request)
    try:
        plan = await run_in_threadpool(lambda: console.rewind.plan(group, request_from_form(form)))
    except Exception as exc:  # noqa: BLE001 - shown on the page
        problem = problem_of(exc)
        return console.html(request, "rewind_plan.html", problem.status, group=group, plan=None, problem=problem,
                            changed="", page="group")
    return console.html(request, "rewind_plan.html", group=group, plan=plan, changed="", page="group")


async def rewind_confirm(request: Request) -> HTMLResponse:
    """POST of the plan page's confirmation: the offsets move only if the plan still holds (rewind_flow)."""
    console = _console(request)
    group = request.path_params["group"]
    form = await form_fields(request)
    try:
        moved = await run_in_threadpool(console.rewind.confirm, group, form)
    except PlanChanged as exc:
        return console.html(request, "rewind_plan.html", 409, group=group, plan=exc.plan, changed=str(exc),
                            page="group")
    except Exception as exc:  # noqa: BLE001 - shown on the page
        problem = problem_of(exc)
        return console.html(request, "rewind_plan.html", problem.status, group=group, plan=None, problem=problem,
                            changed="", page="group")
    return console.html(request, "rewind_done.html", group=group, moved=moved, page="group")


PAGE_ROUTES = [
    Route("/", brokers_page, name="brokers"),
    Route("/topics", topics_page, name="topics"),
    Route("/topics/{topic}", topic_page, name="topic"),
    Route("/topics/{topic}/{partition:int}/messages", messages_page, name="messages"),
    Route("/groups", groups_page, name="groups"),
    Route("/groups/{group}", group_page, name="group"),
    Route("/groups/{group}/rewind", rewind_plan, methods=["POST"], name="rewind_plan"),
    Route("/groups/{group}/rewind/confirm", rewind_confirm, methods=["POST"], name="rewind_confirm"),
]
