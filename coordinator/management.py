"""CreateGroup, DeleteGroup and ListGroups: validation, records and listings.

Pure functions of the group table and a request; they return the response and
the records to persist, and change nothing themselves.

- CreateGroup: the name follows the topic-name rules; ``session_timeout`` 0 means
  the default (45 s, within the bounds), otherwise it must be within the bounds;
  ``assignment_strategy`` "" means ``range``; ``rebalance_timeout`` 0 means the
  session timeout, otherwise it must lie in 1..``max_session_timeout_ms``
  (``Limits.rebalance_timeout_ok``; else INVALID_REQUEST, as the field is not a
  session timeout). Creating an existing group with the same settings (after those
  defaults) answers NONE and writes nothing; with different settings,
  GROUP_ALREADY_EXISTS (this includes a group created implicitly by a commit).
- DeleteGroup: per group, GROUP_NOT_FOUND, GROUP_IS_EPHEMERAL (it goes away by
  itself) or GROUP_NOT_EMPTY (it has members); ``error_code`` is the first error.
- ListGroups: with no names, every group that exists (also EMPTY ones: their
  offsets are still kept; ``state`` tells them apart). With names, those groups
  in that order, GROUP_NOT_FOUND in the GroupInfo of a missing one and as the
  response's ``error_code``. ``topics`` is the group's topics, its live members'
  and those it has committed offsets for: a group a consumer created has no topics
  of its own, and once its members have left only its commits say what it reads.
"""

from __future__ import annotations

from collections.abc import Mapping

from rill.client.topic_names import is_valid_topic
from rill.coordinator.assignors import ASSIGNORS, DEFAULT_ASSIGNOR
from rill.coordinator.group_state import Group
from rill.coordinator.limits import Limits
from rill.coordinator.records import GroupCreated, GroupDeleted, Record
from rill.v1 import coordinator_pb2 as pb


def implicit_settings(name: str, limits: Limits) -> GroupCreated:
    """The settings of a group created by a commit without a consumer id."""
    return GroupCreated(name, limits.default_session_timeout_ms, 0, (), DEFAULT_ASSIGNOR, False)


def _settings(req: pb.CreateGroupRequest, limits: Limits) -> GroupCreated | pb.ErrorCode:
    if not is_valid_topic(req.consumer_group):
        return pb.INVALID_GROUP_NAME
    timeout = req.session_timeout or limits.default_session_timeout_ms
    if not limits.session_timeout_ok(timeout):
        return pb.INVALID_SESSION_TIMEOUT
    if not limits.rebalance_timeout_ok(req.rebalance_timeout):
        return pb.INVALID_REQUEST
    strategy = req.assignment_strategy or DEFAULT_ASSIGNOR
    if strategy not in ASSIGNORS:
        return pb.INVALID_ASSIGNMENT_STRATEGY
    if not all(is_valid_topic(t) for t in req.topics):
        return pb.INVALID_TOPIC
    return GroupCreated(req.consumer_group, timeout, req.rebalance_timeout, tuple(sorted(set(req.topics))),
                        strategy, req.ephemeral)


def create(groups: Mapping[str, Group], req: pb.CreateGroupRequest, limits: Limits,
           broker: pb.Broker) -> tuple[pb.CreateGroupResponse, list[Record]]:
    settings = _settings(req, limits)
    if not isinstance(settings, GroupCreated):
        return pb.CreateGroupResponse(consumer_group=req.consumer_group, error_code=settings, coordinator=broker), []
    existing = groups.get(settings.group)
    if existing is not None:
        code = pb.NONE if existing.settings == settings else pb.GROUP_ALREADY_EXISTS
        return pb.CreateGroupResponse(consumer_group=settings.group, error_code=code, coordinator=broker), []
    return pb.CreateGroupResponse(consumer_group=settings.group, error_code=pb.NONE, coordinator=broker), [settings]


def _delete_code(group: Group | None) -> pb.ErrorCode:
    if group is None:
        return pb.GROUP_NOT_FOUND
    if group.ephemeral:
        return pb.GROUP_IS_EPHEMERAL
    if group.members:
        return pb.GROUP_NOT_EMPTY
    return pb.NONE


def delete(groups: Mapping[str, Group], req: pb.DeleteGroupRequest) -> tuple[pb.DeleteGroupResponse, list[Record]]:
    response = pb.DeleteGroupResponse(error_code=pb.NONE)
    records: list[Record] = []
    for name in dict.fromkeys(req.consumer_group):
        code = _delete_code(groups.get(name))
        if code == pb.NONE:
            response.deleted_consumer_groups.append(name)
            records.append(GroupDeleted(name))
            continue
        response.errors.add(consumer_group=name, error_code=code)
        if response.error_code == pb.NONE:
            response.error_code = code
    return response, records


def group_info(group: Group, broker: pb.Broker) -> pb.GroupInfo:
    return pb.GroupInfo(
        group_name=group.name, group_members=sorted(group.members),
        topics=sorted(group.topics | group.subscribed_topics() | {tp.topic for tp in group.offsets}),
        controller_broker=broker,
        session_timeout=group.session_timeout_ms, error_code=pb.NONE, state=group.state.value,
        generation=group.generation, assignment_strategy=group.strategy, ephemeral=group.ephemeral)


def listing(groups: Mapping[str, Group], req: pb.ListGroupsRequest, broker: pb.Broker) -> pb.ListGroupsResponse:
    response = pb.ListGroupsResponse(client_id=req.client_id, error_code=pb.NONE)
    for name in list(req.consumer_groups) or sorted(groups):
        group = groups.get(name)
        if group is None:
            response.groups_info.add(group_name=name, error_code=pb.GROUP_NOT_FOUND)
            response.error_code = pb.GROUP_NOT_FOUND
        else:
            response.groups_info.append(group_info(group, broker))
    return response
