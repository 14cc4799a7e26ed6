"""The rewind form: a plan first, the move only after an explicit confirmation that still holds.

1. **Plan.** The form (which partitions: all of the group's or one topic, some of its
   partitions; where to: earliest, latest, an offset, a date and time, a duration ago,
   a shift by N messages) becomes a :class:`~rill.client.cli.rewind_plan.RewindRequest`
   and is resolved exactly as ``rill groups rewind`` without ``--execute`` resolves it
   (:func:`~rill.client.cli.rewind_plan.rewind_offsets` with a dry run: the coordinator
   resolves and checks every offset and moves nothing). A duration is turned into its
   time once, here, so confirming later means the same moment.
2. **Confirm.** The plan page's form carries the request, the planned offsets, the time
   it was planned and a token: an HMAC-SHA256 of those under a key this console process
   drew at random. A second POST with them moves the offsets only if
   - the token matches (a forged or edited plan, or one from before the console
     restarted, is refused: nothing moves),
   - the plan is at most :data:`MAX_AGE_S` old,
   - planning the same request again gives the same partitions and offsets (for
     ``latest``, the log may have grown since: the end then is later, and the
     confirmed offsets still move as shown). A plan that changed (a member committed
     since, a topic gained partitions, retention moved the log start) is refused
     with :class:`PlanChanged`, which carries the new plan to confirm instead.
   Then RewindConsumer moves exactly the confirmed offsets (target OFFSET), all or none:
   what moves is what was shown.

The token's key never leaves the process, so a page elsewhere cannot make a valid
confirmation (the console's pages also refuse Host names other than its own: console_app).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

from rill.client.cli.reset_targets import parse_datetime_ms, parse_duration_ms, topic_spec
from rill.client.cli.rewind_plan import RewindRequest, refusal, rewind_offsets
from rill.client.console.cluster_access import ClusterAccess
from rill.client.console.console_errors import InvalidInput
from rill.client.grpc_client import AdminClient
from rill.v1 import coordinator_pb2 as pb

__all__ = ["MAX_AGE_S", "TARGETS", "Moved", "Plan", "PlanChanged", "RewindFlow", "request_from_form"]

TARGETS = ("earliest", "latest", "offset", "datetime", "duration", "shift")
MAX_AGE_S = 900.0

Offsets = tuple[tuple[str, int, int], ...]


@dataclass(frozen=True)
class Plan:
    """A planned rewind: the new offset of each partition (sorted), each one's committed offset now (-1: none),
    the notes of the resolution (offsets clamped to a log), and the signed confirmation the page carries."""

    group: str
    request: RewindRequest
    offsets: Offsets
    committed: dict[str, int]     # "topic-partition" -> committed offset
    notices: tuple[str, ...]
    issued: int
    request_json: str
    offsets_json: str
    token: str


@dataclass(frozen=True)
class Moved:
    """A confirmed rewind that moved: the plan, and the offsets the coordinator committed."""

    plan: Plan
    moved: Offsets


class PlanChanged(Exception):
    """Planning again gave another plan: nothing moved; ``plan`` is the new one to confirm."""

    def __init__(self, plan: Plan, why: str) -> None:
        super().__init__(f"The plan changed since it was shown ({why}): nothing moved. Check the new plan below "
                         "and confirm it if it is what you want.")
        self.plan = plan


def request_from_form(form: Mapping[str, str], now: float | None = None) -> RewindRequest:
    """The rewind the form asks for: fields ``topic`` (empty: all the group's), ``partitions`` (``0,2``; empty:
    all), ``target`` (one of :data:`TARGETS`) and ``value`` (the offset, date, duration or shift).

    Raises:
        InvalidInput: a field that cannot be used (the message says which).
    """
    topic, partitions, target = (form.get(k, "").strip() for k in ("topic", "partitions", "target"))
    value = form.get("value", "").strip()
    try:
        scope = None if not topic else (topic_spec(f"{topic}:{partitions}" if partitions else topic),)
        if target in ("earliest", "latest"):
            return RewindRequest(scope, to_earliest=target == "earliest", to_latest=target == "latest")
        if target == "offset":
            return RewindRequest(scope, to_offset=_whole(value, "the offset", minimum=0))
        if target == "shift":
            return RewindRequest(scope, shift_by=_whole(value, "the shift", minimum=None))
        if target == "datetime":
            return RewindRequest(scope, to_time_ms=max(0, parse_datetime_ms(value)))
        if target == "duration":
            return RewindRequest(scope, to_time_ms=max(0, parse_duration_ms(value, now)))
    except argparse.ArgumentTypeError as exc:
        raise InvalidInput(str(exc)) from None
    raise InvalidInput(f"choose where to rewind to: one of {', '.join(TARGETS)}")


def _whole(text: str, what: str, minimum: int | None) -> int:
    try:
        number = int(text)
    except ValueError:
        raise InvalidInput(f"{what} must be a whole number, not {text!r}") from None
    if minimum is not None and number < minimum:
        raise InvalidInput(f"{what} must be at least {minimum}, not {number}")
    return number


class RewindFlow:
    """Plans and confirmed moves of group offsets (see the module docstring). Thread-safe."""

    def __init__(self, access: ClusterAccess, *, key: bytes | None = None, max_age: float = MAX_AGE_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.access = access
        self._key = key if key is not None else secrets.token_bytes(32)
        self.max_age = max_age
        self.clock = clock

    def plan(self, group: str, request: RewindRequest) -> Plan:
        """A dry run of ``request`` at the group's coordinator, signed for confirmation.

        Raises:
            InvalidInput: the coordinator refused the rewind (each partition's error), or the partitions
                cannot be worked out (CliError: an unknown topic, nothing committed to shift).
            NotFound, RillError: no such group; unreachable; refused by the ACLs (Alter on the group).
        """
        notices: list[str] = []

        def dry_run(admin: AdminClient, info: pb.GroupInfo) -> tuple[pb.RewindConsumerResponse, dict[str, int]]:
            response = rewind_offsets(admin, group, request, self.access.data_plane, execute=False,
                                      notice=notices.append)
            committed = {f"{o.topic}-{o.partition}": o.offset for o in admin.fetch_offsets(group).offsets}
            return response, committed

        response, committed = self.access.group_call(group, dry_run)
        if response.error_code:
            raise InvalidInput(f"The coordinator refused this rewind, nothing would move: {refusal(response)}")
        offsets = tuple(sorted((o.topic, o.partition, o.offset) for o in response.actual_offsets))
        return self._signed(group, request, offsets, committed, tuple(notices), int(self.clock()))

    def _signed(self, group: str, request: RewindRequest, offsets: Offsets, committed: dict[str, int],
                notices: tuple[str, ...], issued: int) -> Plan:
        request_json = json.dumps(asdict(request), sort_keys=True, separators=(",", ":"))
        offsets_json = json.dumps([list(o) for o in offsets], separators=(",", ":"))
        return Plan(group, request, offsets, committed, notices, issued, request_json, offsets_json,
                    self._token(group, request_json, offsets_json, str(issued)))

    def _token(self, group: str, request_json: str, offsets_json: str, issued: str) -> str:
        message = "\n".join((group, request_json, offsets_json, issued)).encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def confirm(self, group: str, form: Mapping[str, str]) -> Moved:
        """Move the offsets of the confirmed plan in ``form`` (fields ``request``, ``offsets``, ``issued``, ``token``).

        Raises:
            InvalidInput: not a confirmation this console issued, or too old, or the coordinator refused
                the move (nothing moved in each case).
            PlanChanged: planning again gives another plan (nothing moved).
            NotFound, RillError: as :meth:`plan`.
        """
        request_json, offsets_json, issued = (form.get(k, "") for k in ("request", "offsets", "issued"))
        expected = self._token(group, request_json, offsets_json, issued)
        if not hmac.compare_digest(expected, form.get("token", "")):
            raise InvalidInput("This confirmation was not issued by this console for this group (it was changed, "
                               "or the console restarted since): nothing moved. Plan the rewind again.")
        age = self.clock() - int(issued)
        if age > self.max_age:
            raise InvalidInput(f"This plan is {age / 60:.0f} minutes old (at most {self.max_age / 60:.0f}): nothing "
                               "moved. Plan the rewind again.")
        fields = json.loads(request_json)
        request = RewindRequest(**{**fields, "scope": None if fields["scope"] is None else tuple(
            (t, tuple(ps)) for t, ps in fields["scope"])})
        confirmed: Offsets = tuple((str(t), int(p), int(o)) for t, p, o in json.loads(offsets_json))
        fresh = self.plan(group, request)
        why = _difference(confirmed, fresh.offsets, growing=request.to_latest)
        if why:
            raise PlanChanged(fresh, why)

        def move(admin: AdminClient, info: pb.GroupInfo) -> pb.RewindConsumerResponse:
            return admin.rewind(group, list(confirmed), target=pb.OFFSET, dry_run=False)

        response = self.access.group_call(group, move)
        if response.error_code:
            raise InvalidInput(f"The coordinator refused the move, nothing moved: {refusal(response)}")
        plan = self._signed(group, request, confirmed, fresh.committed, fresh.notices, int(issued))
        return Moved(plan, tuple(sorted((o.topic, o.partition, o.offset) for o in response.actual_offsets)))


def _difference(confirmed: Offsets, fresh: Offsets, *, growing: bool) -> str:
    """Why the fresh plan differs from the confirmed one ('' when it does not; with ``growing``, a later offset
    in the fresh plan is the log's end having moved on, not a difference)."""
    before = {(t, p): o for t, p, o in confirmed}
    now = {(t, p): o for t, p, o in fresh}
    if set(before) != set(now):
        return "other partitions: " + ", ".join(f"{t}-{p}" for t, p in sorted(set(before) ^ set(now)))
    moved = [f"{t}-{p}: {before[(t, p)]} -> {o}" for (t, p), o in sorted(now.items())
             if o != before[(t, p)] and not (growing and o > before[(t, p)])]
    return ("other offsets: " + ", ".join(moved)) if moved else ""
