"""The message browser: N messages of one partition, from an offset, a time, the start or the end.

Reads go through ``rill consume``'s :class:`~rill.client.cli.consume.TopicReader` (the
partition's leader, the partition's number on that broker) with plain fetches: the
console keeps no position and commits nothing. Offsets are byte positions (Kafka 0.7),
so "from" is one of:

- ``earliest``: the log start; ``offset``: a byte offset, which must be a message
  boundary (an offset printed by this page or ``rill consume --print-offset``);
- ``latest``: the last N messages, found by walking back N message boundaries from the
  end (``rill groups rewind --shift-by``'s walk, rill.client.cli.message_walk);
- ``time``: the first message appended at or after a time, to within one time-index
  interval (``log.index.interval.ms``): OFFSETS answers from the partition's time index.

Each message's append time is the one its time-index entry gives (the last entry at or
before it), as precise as that index. A compressed batch is read whole: its messages
share the batch's offset.

Values are shown as ``text`` (UTF-8; invalid bytes become U+FFFD and a note says so),
``json`` (pretty-printed; a value that is not JSON is shown as text with a note) or
``hex`` (a hexdump, 16 bytes a line); at most :data:`MAX_SHOWN_BYTES` of each.
The templates escape every value.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass

from rill.client.cli.common import CliError
from rill.client.cli.consume import TopicReader
from rill.client.cli.message_walk import shift_offset
from rill.client.console.cluster_access import ClusterAccess
from rill.client.console.console_errors import InvalidInput, NotFound, Offline
from rill.client.errors import BrokerError, InvalidOffset
from rill.client.protocol.messages import Message
from rill.client.simple import SimpleConsumer

__all__ = ["FORMATS", "MAX_COUNT", "MAX_SHOWN_BYTES", "MessagePage", "MessageRow", "StartAt", "browse", "render_value"]

FORMATS = ("text", "json", "hex")
STARTS = ("earliest", "latest", "offset", "time")
MAX_COUNT = 500
MAX_SHOWN_BYTES = 65536
FETCH_SIZE = 1_048_576


@dataclass(frozen=True)
class StartAt:
    """Where to start: ``kind`` is earliest, latest, offset (``offset``) or time (``time_ms``, ms since the epoch)."""

    kind: str
    offset: int = 0
    time_ms: int = 0

    def __post_init__(self) -> None:
        if self.kind not in STARTS:
            raise InvalidInput(f"from must be one of {', '.join(STARTS)}, not {self.kind!r}")


@dataclass(frozen=True)
class MessageRow:
    """One message: where it is, its payload size, its append time (ms, -1: unknown) and its value as shown."""

    offset: int
    next_offset: int
    size: int
    appended_ms: int
    shown: str
    note: str


@dataclass(frozen=True)
class MessagePage:
    """What was read: the partition, where reading started and where the next page starts, the log's bounds."""

    topic: str
    partition: int
    start: StartAt
    first_offset: int
    next_offset: int
    log_start: int
    log_end: int
    format: str
    messages: tuple[MessageRow, ...]


def browse(access: ClusterAccess, topic: str, partition: int, start: StartAt, count: int, fmt: str) -> MessagePage:
    """Up to ``count`` messages of ``topic``-``partition`` from ``start``, shown as ``fmt``.

    Raises:
        InvalidInput: a bad count or format. NotFound: no such topic or partition.
        Offline: the partition's leader is not alive. InvalidInput: the offset is not a message boundary,
        or outside the log. RillError: unreachable, refused by the ACLs.
    """
    if fmt not in FORMATS:
        raise InvalidInput(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if not 1 <= count <= MAX_COUNT:
        raise InvalidInput(f"count must be between 1 and {MAX_COUNT}, not {count}")
    with access.reader(topic, FETCH_SIZE) as reader:
        client, number = _leader(reader, topic, partition)
        log_start, log_end = client.earliest_offset(topic, number), client.latest_offset(topic, number)
        first = _first_offset(client, topic, number, start, count, log_start, log_end)
        messages = _read(client, topic, number, first, count, log_end)
        times = _append_times(client, topic, number, first, log_end)
    rows = tuple(_row(m, times, fmt) for m in messages)
    next_offset = messages[-1].next_offset if messages else first
    return MessagePage(topic, partition, start, first, next_offset, log_start, log_end, fmt, rows)


def _leader(reader: TopicReader, topic: str, partition: int) -> tuple[SimpleConsumer, int]:
    try:
        count = reader.partitions()
    except CliError:  # the one it raises: an unknown topic
        raise NotFound(f"topic {topic!r} does not exist") from None
    if not 0 <= partition < count:
        raise NotFound(f"topic {topic!r} has no partition {partition} (it has {count}: 0..{count - 1})")
    if not reader.available(partition):
        raise Offline(f"{topic}-{partition} is offline: its leader broker is not alive")
    return reader.client(partition)


class _Walk:
    """A partition's reads for the backward walk of ``latest`` (message_walk.PartitionLog)."""

    def __init__(self, client: SimpleConsumer, topic: str, number: int) -> None:
        self.client, self.topic, self.number = client, topic, number

    def fetch(self, offset: int) -> list[Message]:
        return self.client.fetch(self.topic, self.number, offset)

    def index_at_or_before(self, offset: int) -> int | None:
        entries = self.client.time_index(self.topic, self.number, offset, 1)
        return entries[0][0] if entries else None


def _first_offset(client: SimpleConsumer, topic: str, number: int, start: StartAt, count: int,
                  log_start: int, log_end: int) -> int:
    if start.kind == "earliest":
        return log_start
    if start.kind == "latest":
        return shift_offset(_Walk(client, topic, number), log_end, -count, log_start, log_end)
    if start.kind == "time":
        before = client.offsets_before(topic, number, max(0, start.time_ms), 1)
        return before[0] if before else log_start
    if not log_start <= start.offset <= log_end:
        raise InvalidInput(f"offset {start.offset} is outside the log of {topic} (from {log_start} to {log_end}; "
                           "offsets are byte positions)")
    return start.offset


def _read(client: SimpleConsumer, topic: str, number: int, offset: int, count: int, log_end: int) -> list[Message]:
    messages: list[Message] = []
    while len(messages) < count and offset < log_end:
        try:
            batch = client.fetch(topic, number, offset, FETCH_SIZE)
        except InvalidOffset:
            raise InvalidInput(f"offset {offset} is not where a message of {topic} starts (offsets are byte "
                               "positions: use an offset listed on this page, or the start or the end)") from None
        if not batch:
            break
        messages.extend(batch)
        offset = batch[-1].next_offset
    return messages[:count]


def _append_times(client: SimpleConsumer, topic: str, number: int, first: int, log_end: int) -> list[tuple[int, int]]:
    """The partition's time-index entries (offset, append time ms) from the one at or before ``first``."""
    if first >= log_end:
        return []
    try:
        return client.time_index(topic, number, first, 8192)
    except BrokerError:  # the times are a help, not the point: shown as unknown
        return []


def _row(m: Message, times: list[tuple[int, int]], fmt: str) -> MessageRow:
    at = bisect.bisect_right([offset for offset, _ in times], m.offset) - 1
    shown, note = render_value(m.value, fmt)
    return MessageRow(m.offset, m.next_offset, len(m.value), times[at][1] if at >= 0 else -1, shown, note)


def render_value(value: bytes, fmt: str) -> tuple[str, str]:
    """``value`` as ``fmt`` shows it, and a note (empty, or what was cut or could not be shown so)."""
    cut = value[:MAX_SHOWN_BYTES]
    note = f"the first {MAX_SHOWN_BYTES} of {len(value)} bytes" if len(value) > MAX_SHOWN_BYTES else ""
    if fmt == "hex":
        return _hexdump(cut), note
    text = cut.decode("utf-8", errors="replace")
    if fmt == "json" and not note:
        try:
            return json.dumps(json.loads(value), indent=2, ensure_ascii=False), ""
        except ValueError:
            return text, "not JSON: shown as text"
    if "\ufffd" in text and "\ufffd".encode() not in cut:
        note = "; ".join(n for n in (note, "not valid UTF-8: the bad bytes are shown as \ufffd (see hex)") if n)
    elif fmt == "json":
        note = f"{note}; too long to parse as JSON: shown as text"
    return text, note


def _hexdump(data: bytes) -> str:
    lines = []
    for at in range(0, len(data), 16):
        chunk = data[at:at + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk[:8]) + "  " + " ".join(f"{b:02x}" for b in chunk[8:])
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{at:08x}  {hexes:<48}  |{text}|")
    return "\n".join(lines)
