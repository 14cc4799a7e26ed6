"""``rill groups`` in a cluster: every action asked through one broker's data port reaches the group's
coordinator on another broker (two in-process brokers on a real ZooKeeper)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from rill.client.cli.groups_describe import STATE_HEADER
from rill.client.cli.main import main
from rill.client.grpc_client import AdminClient
from tests.zookeeper.test_broker_registration import wait_for, zk_broker
from tests.zookeeper.test_group_log import coordinator_of, topic_with_one_message


def test_group_actions_go_to_the_coordinator(tmp_path: Path, zk_connect: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """create, describe --state, rewind --execute and delete (twice) of a group broker 2 coordinates, all
    asked of broker 1's data port."""
    with capture_logs(), ExitStack() as stack:
        b1, b2 = (stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=i, offsets_topic_replication_factor=2))
                  for i in (1, 2))  # factor 2: the groups topic's partitions are led by both
        for b in (b1, b2):
            placement = b.broker.coordination.placement
            assert placement is not None
            wait_for(placement.serving_all, what="the groups topic led and loaded")
        end = topic_with_one_message(b1, b2)
        group = next(f"app-{n}" for n in range(100) if coordinator_of(b1, f"app-{n}") == 2)
        via = ["--bootstrap-server", b1.address]

        assert main(["groups", "create", group, "--topic", "t", *via]) == 0
        assert capsys.readouterr().out == f"Created group {group} (coordinator broker 2, 127.0.0.1:{b2.port}).\n"
        assert main(["groups", "describe", group, "--state", *via]) == 0
        assert capsys.readouterr().out.splitlines() == [STATE_HEADER,
                                                        f"{group}\t127.0.0.1:{b2.port} (2)\trange\tEmpty\t0"]
        assert main(["groups", "rewind", group, "--topic", "t", "--to-latest", "--execute", *via]) == 0
        assert capsys.readouterr().out.splitlines()[1:] == [f"{group}\tt\t0\t{end}", f"{group}\tt\t1\t{end}"]
        with AdminClient(b2.grpc_address) as admin:
            assert {o.partition: o.offset for o in admin.fetch_offsets(group).offsets} == {0: end, 1: end}
        assert main(["groups", "describe", group, *via]) == 0
        assert "coordinator broker 2" in capsys.readouterr().out
        assert main(["groups", "delete", group, *via]) == 0
        assert capsys.readouterr().out == f"Deleted group {group}.\n"
        assert main(["groups", "delete", group, *via]) == 1  # not NOT_COORDINATOR: the group is gone
        assert capsys.readouterr().out == f"Group {group} not deleted: GROUP_NOT_FOUND\n"
