"""``rill consume --group G``: read a topic as a member of consumer group G (kcat's balanced consumer
``-G``, kafka-console-consumer ``--group``).

The command joins the group with a :class:`~rill.client.consumer.Consumer` (the group's
coordinator assigns it partitions, shared with the group's other members), starts each
partition at the group's committed offset (``--offset earliest|latest`` where none is
committed: ``auto.offset.reset``), and commits after writing each batch to stdout, so a
command stopped at any point (Ctrl-C, ``--max-messages``, a closed pipe) resumes after
the last batch it wrote: at-least-once, as kcat. Without ``--follow`` it stops once each
of its partitions reached the end it had when first assigned; on exit it leaves the
group (the others rebalance at once). A member evicted (its coordinator unreachable for
a session timeout) says so on stderr and joins again.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from rill.client.cli.bootstrap import join_address
from rill.client.cli.common import CliError, info
from rill.client.consumer import CommitFailed, Consumer, MemberEvicted, TopicPartition
from rill.client.protocol.messages import Message

__all__ = ["CLIENT_ID", "run_group"]

CLIENT_ID = "rill-consume"


def run_group(args: argparse.Namespace, render: Callable[[Message], bytes]) -> int:
    """Consume ``args.topic`` in group ``args.group`` (see the module docstring); the exit status."""
    consumer = Consumer(bootstrap_servers=[join_address(host, port) for host, port in args.bootstrap],
                        group_id=args.group, client_id=CLIENT_ID, enable_auto_commit=False,
                        auto_offset_reset=args.offset, request_timeout_ms=int(args.timeout * 1000),
                        max_partition_fetch_bytes=args.fetch_size)
    out = sys.stdout.buffer
    printed = 0
    try:
        consumer.subscribe([args.topic])
        ends: dict[TopicPartition, int] = {}
        join_deadline = time.monotonic() + args.timeout
        while args.max_messages is None or printed < args.max_messages:
            left = None if args.max_messages is None else args.max_messages - printed
            try:
                messages = consumer.poll(args.poll_ms / 1000, max_records=left)
            except MemberEvicted as exc:  # its partitions went to others; the next poll() joins again
                info(f"rill consume: {exc}")
                join_deadline = time.monotonic() + args.timeout
                continue
            if messages:
                printed += len(messages)  # counted before the write, which Ctrl-C can interrupt after it wrote
                out.write(b"".join([render(m) for m in messages]))
                out.flush()
                _commit(consumer)
            elif not args.follow and _caught_up(consumer, ends, join_deadline, args):
                break
    finally:
        consumer.close()
        if not args.quiet:
            info(f"Processed a total of {printed} messages")
    return 0


def _commit(consumer: Consumer) -> None:
    """Commit what was written; a commit refused during a rebalance is reported, and those messages will be
    read again by their next owner (at-least-once)."""
    try:
        consumer.commit()
    except CommitFailed as exc:
        info(f"rill consume: commit refused ({exc}); the partitions' next owner reads those messages again")


def _caught_up(consumer: Consumer, ends: dict[TopicPartition, int], join_deadline: float,
               args: argparse.Namespace) -> bool:
    """Whether every partition this member owns is read to the end it had when first assigned (no partition
    owned: nothing to read). CliError when the group was not joined within ``--timeout``."""
    if consumer.generation == 0:
        if time.monotonic() > join_deadline:
            raise CliError(f"did not join group {args.group!r} within {args.timeout:g} s (--timeout)")
        return False
    owned = consumer.assignment()
    new = [tp for tp in owned if tp not in ends]
    if new:
        ends.update(consumer.end_offsets(new))
    return all(consumer.position(tp) >= ends[tp] for tp in owned)
