"""The console's JSON endpoints: what each page shows, as data (read-only; rewinds go through the pages' form).

| endpoint | data |
|---|---|
| ``GET /api/brokers`` | broker_roles.BrokersView |
| ``GET /api/topics`` | a list of topic_overview.TopicRow |
| ``GET /api/topics/{topic}`` | topic_overview.TopicView |
| ``GET /api/topics/{topic}/{partition}/messages?from=&offset=&time=&count=&format=`` | message_browser.MessagePage |
| ``GET /api/groups`` | a list of group_overview.GroupRow |
| ``GET /api/groups/{group}`` | group_overview.GroupView, with ``history``: ``[[time, {lag_bytes, lag_seconds}], ...]`` |
| ``GET /api/sampler`` | lag_sampler.SamplerStatus, the interval and the window |

Field names are the dataclasses'; times are seconds since the epoch (``*_ms``: milliseconds);
offsets are byte positions, -1 where unknown. A failure is ``{"error": {"kind", "message"}}``
with the status console_errors gives it.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from rill.client.console.broker_roles import brokers_view
from rill.client.console.console_app import Console, json_response
from rill.client.console.console_pages import browse_query, count_from_query, start_from_query
from rill.client.console.group_overview import group_view, groups_view
from rill.client.console.message_browser import MessagePage, browse
from rill.client.console.topic_overview import topic_view, topics_view

__all__ = ["API_ROUTES"]


def _console(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def brokers(request: Request) -> Response:
    console = _console(request)
    return json_response(lambda: brokers_view(console.access))


def topics(request: Request) -> Response:
    console = _console(request)
    return json_response(lambda: topics_view(console.access, console.sampler))


def topic(request: Request) -> Response:
    console = _console(request)
    return json_response(lambda: topic_view(console.access, console.sampler, request.path_params["topic"]))


def messages(request: Request) -> Response:
    console = _console(request)
    query = browse_query(request)

    def build() -> MessagePage:
        return browse(console.access, request.path_params["topic"], request.path_params["partition"],
                      start_from_query(query), count_from_query(query), query["format"])

    return json_response(build)


def groups(request: Request) -> Response:
    console = _console(request)
    return json_response(lambda: groups_view(console.access, console.sampler))


def group(request: Request) -> Response:
    console = _console(request)
    return json_response(lambda: group_view(console.access, console.sampler, request.path_params["group"]))


def sampler(request: Request) -> Response:
    console = _console(request)
    return json_response(lambda: {"status": console.sampler.status(), "interval_seconds": console.sampler.interval,
                                  "window_seconds": console.sampler.window})


API_ROUTES = [
    Route("/api/brokers", brokers),
    Route("/api/topics", topics),
    Route("/api/topics/{topic}", topic),
    Route("/api/topics/{topic}/{partition:int}/messages", messages),
    Route("/api/groups", groups),
    Route("/api/groups/{group}", group),
    Route("/api/sampler", sampler),
]
