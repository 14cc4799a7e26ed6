"""``rill groups list|describe --zookeeper``: a group of ZooKeeper consumers (0.7's layout) shown with its
owners, committed offsets and lag, as Kafka 0.7's ConsumerOffsetChecker did; real ZooKeeper, real brokers."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from structlog.testing import capture_logs

from rill.client.cli.groups_describe import MEMBERS_HEADER
from rill.client.cli.main import main
from rill.client.zookeeper import ZkConsumer, ZkRecord
from tests.zookeeper.test_broker_registration import wait_for
from tests.zookeeper.zk_consumer_support import FAST, owners, produce, zk_brokers

NAMES = ["0-0", "0-1", "1-0", "1-1"]  # topic t: two partitions on each of brokers 0 and 1


def table(out: str) -> dict[str, list[str]]:
    """Rows of the describe table by partition name, after the summary and header lines."""
    lines = out.splitlines()
    assert lines[1] == "TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG_BYTES\tOWNER"
    return {r.split("\t")[1]: r.split("\t") for r in lines[2:]}


def test_describe_shows_owners_offsets_and_lag(tmp_path: Path, zk_connect: str, zk: KazooClient,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A live member's owners, its commits and the log ends; after more messages, the lag in bytes; once it
    left, no owners and the offsets kept."""
    with capture_logs(), zk_brokers(tmp_path, zk_connect, {"t": 2}, zk=zk) as brokers:
        sent = produce(brokers, "t", 2, 3)
        consumer = ZkConsumer(zookeeper=zk_connect, group="g", **{**FAST, "autocommit_enable": False})
        consumer.subscribe(["t"])
        got: list[ZkRecord] = []
        wait_for(lambda: got.extend(consumer.poll(0.1)) or len(got) == len(sent), what="every message")
        consumer.commit()
        wait_for(lambda: len(owners(zk, "g", "t")) == 4, what="four owners")
        ends = {f"{r.broker_id}-{r.partition}": r.next_offset for r in got}
        assert main(["groups", "describe", "g", "--zookeeper", zk_connect]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"Group g: 1 member(s), offsets and owners in ZooKeeper {zk_connect}\n")
        rows = table(out)
        assert sorted(rows) == NAMES
        for name, row in rows.items():
            assert row == ["t", name, str(ends[name]), str(ends[name]), "0", f"{consumer.consumer_id}-0"]

        assert main(["groups", "describe", "g", "--members", "--zookeeper", zk_connect]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines == [MEMBERS_HEADER, f"g\t{consumer.consumer_id}\t{socket.gethostname()}\t-\t4\t"
                                         f"t(0-0,0-1,1-0,1-1)"]
        consumer.close()

        more = produce(brokers[:1], "t", 1, 2, tag="late")  # two more messages in 0-0
        assert main(["groups", "describe", "--group", "g", "--zookeeper", zk_connect]) == 0
        rows = table(capsys.readouterr().out)
        grown = int(rows["0-0"][3])
        assert grown > ends["0-0"] and rows["0-0"][4] == str(grown - ends["0-0"]) and len(more) == 2
        assert [r[5] for r in rows.values()] == ["-"] * 4 and rows["1-1"][2] == str(ends["1-1"])


def test_list_names_every_zookeeper_group(tmp_path: Path, zk_connect: str, zk: KazooClient,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """list --zookeeper gives each group under /consumers with its members and topics; an unknown group is
    named."""
    zk.create("/consumers/old/offsets/t/0-0", b"42", makepath=True)
    zk.create("/consumers/old/ids", b"", makepath=True)
    assert main(["groups", "list", "--zookeeper", zk_connect]) == 0
    assert capsys.readouterr().out == "GROUP\tMEMBERS\tTOPICS\nold\t0\tt\n"
    assert main(["groups", "describe", "old", "--zookeeper", zk_connect]) == 0
    rows = table(capsys.readouterr().out)
    assert rows == {"0-0": ["t", "0-0", "42", "-", "-", "-"]}  # no broker holds it: end and lag unknown
    assert main(["groups", "describe", "ghost", "--zookeeper", zk_connect]) == 1
    assert "group 'ghost' is not in ZooKeeper" in capsys.readouterr().err
