"""``rill perf elections``: a cluster with many replicated partitions losing a broker and taking it back.

On a cluster of its own (rill.client.cli.perf.cluster_setup), a topic of ``--partitions``
partitions (1,000 by default) with replication factor ``--brokers``, and
``--messages-per-partition`` messages in each. Then:

1. **Elections after kill -9**: a broker that is not the controller is killed. Once its
   ZooKeeper session expires the controller moves the leadership of every partition it
   led to a live in-sync replica, in one batch, and tells every broker. Figures: the
   controller's own log line (``controller.elections``): from noticing the broker gone to
   the new states written to ZooKeeper, and to every broker having answered
   LeaderAndIsr (each new leader serves from then on); and, from outside, the time from
   the kill until METADATA names a live leader for every partition (this includes the
   session timeout).
2. **A broker following them all starts again**: while it is down as many messages
   again are written to every partition. Figures: its start-up (until it serves), the
   time until it is back in every partition's ISR (it caught up), and its resident
   memory then, with the other brokers' for comparison.
3. **Its graceful stop** (SIGTERM: a controlled shutdown, as a follower of every
   partition): how long it takes.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from rill.client.cli.common import CliError, positive_int
from rill.client.cli.perf.cluster_setup import add_cluster_arguments, finish, new_cluster, payloads, say
from rill.client.cli.perf.report import report
from rill.client.cli.spawned_broker import SpawnedBroker
from rill.client.cli.spawned_cluster import SpawnedCluster
from rill.client.errors import BrokerError, ConnectionClosed
from rill.client.producer import Producer
from rill.client.protocol import requests as rq
from rill.client.simple import SimpleConsumer

TOPIC = "elections"


def add_parsers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = kinds.add_parser("elections", help="a cluster of its own: leader elections for many partitions after "
                                           "kill -9 of a broker; start-up and RSS of a broker following them all")
    add_cluster_arguments(p)
    p.add_argument("--partitions", type=positive_int, default=1000, help="partitions of the topic (default: 1000)")
    p.add_argument("--messages-per-partition", type=positive_int, default=100, metavar="N",
                   help="messages written to every partition before the kill, and again while the broker is down "
                        "(default: 100)")
    p.set_defaults(run=run_elections)


def run_elections(args: argparse.Namespace) -> int:
    # the groups topic in one partition: the elections measured are (all but one) the benchmark topic's
    cluster = new_cluster(args, {"offsets.topic.num.partitions": 1})
    try:
        say(args, f"starting ZooKeeper and {args.brokers} brokers under {cluster.work}")
        cluster.start()
        created_s = cluster.create_topic(TOPIC, args.partitions, args.brokers, timeout=600)
        say(args, f"  {args.partitions:,} partitions of factor {args.brokers} led and in sync in {created_s:.1f} s")
        _write(args, cluster)
        victim = _victim(cluster)
        led = sum(1 for leader in cluster.leaders(TOPIC).values() if leader == victim.broker_id)
        elections = _kill_and_elect(args, cluster, victim)
        elections["victim_led"] = led
        say(args, f"  kill -9 of broker {victim.broker_id} (leader of {led} partitions): controller "
                  f"{elections['controller_total_ms']:,.0f} ms from noticing to every leader told")
        _write(args, cluster)
        restart = _restart(args, cluster, victim)
        stop_s = victim.stop(timeout=600)
    finally:
        finish(args, cluster)
    restart["graceful_stop_s"] = stop_s
    result = {"benchmark": "elections", "brokers": args.brokers, "partitions": args.partitions,
              "messages_per_partition": args.messages_per_partition, "create_s": created_s,
              "elections": elections, "restart": restart}
    lines = [f"rill perf elections: {args.brokers} brokers, {args.partitions:,} partitions of factor {args.brokers}, "
             f"{args.messages_per_partition} messages of {args.message_size} B each written twice",
             f"  created, every partition led and in sync: {created_s:.2f} s",
             f"  kill -9 of broker {elections['victim']}, leader of {led} partitions: the controller "
             f"wrote {elections['changed']:,} partition states in {elections['controller_written_ms']:,.0f} ms and "
             f"had every LeaderAndIsr answered {elections['controller_total_ms']:,.0f} ms after noticing; "
             f"METADATA named a live leader for every partition {elections['kill_to_all_led_s']:.2f} s after the kill "
             f"(zookeeper.session.timeout.ms included)",
             f"  broker {elections['victim']} again, following {args.partitions:,} partitions: serving in "
             f"{restart['start_s']:.2f} s, back in every ISR {restart['in_sync_s']:.2f} s after its start; "
             f"RSS {restart['rss_mb']:.0f} MB (the others: "
             f"{', '.join(f'{mb:.0f}' for mb in restart['others_rss_mb'])} MB); "
             f"graceful stop {restart['graceful_stop_s']:.2f} s"]
    report(args, result, lines)
    return 0


def _victim(cluster: SpawnedCluster) -> SpawnedBroker:
    controller = cluster.controller_id()
    for broker in cluster.live():
        if broker.broker_id != controller:
            return broker
    raise CliError("every broker is the controller?")


def _write(args: argparse.Namespace, cluster: SpawnedCluster) -> None:
    pool = payloads(args.message_size)
    with Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "client.id": "rill-perf"}) as producer:
        responses = [producer.send_many(TOPIC, pool[:args.messages_per_partition], partition=p)
                     for p in range(args.partitions)]
        producer.flush()
    failed = [r.get_error(0) for r in responses if r.get_error(0) is not None]
    if failed:
        raise CliError(f"{len(failed)} of {len(responses)} partitions' writes failed: {failed[0]!r}")


def _kill_and_elect(args: argparse.Namespace, cluster: SpawnedCluster, victim: SpawnedBroker) -> dict[str, Any]:
    controller = cluster.brokers[cluster.controller_id()]
    before = len(controller.events("controller.elections"))
    killed = time.monotonic()
    victim.kill9()
    survivor = cluster.any_live()
    deadline = killed + 120
    while True:
        if _all_led(survivor, args.partitions, victim.broker_id):
            all_led = time.monotonic() - killed
            break
        if time.monotonic() > deadline:
            raise CliError(f"partitions of {TOPIC} still without a live leader 120 s after the kill")
        time.sleep(0.01)
    while True:
        events = [e for e in controller.events("controller.elections")[before:] if e.get("reason") == "broker_failure"]
        if events:
            event = events[-1]
            break
        if time.monotonic() > deadline:
            raise CliError("the controller logged no elections for the broker's failure")
        time.sleep(0.05)
    return {"victim": victim.broker_id, "controller": controller.broker_id, "changed": int(event["changed"]),
            "offline": int(event["offline"]), "controller_written_ms": float(event["written_ms"]),
            "controller_total_ms": float(event["total_ms"]), "kill_to_all_led_s": all_led}


def _all_led(survivor: SpawnedBroker, partitions: int, dead: int | None) -> bool:
    try:
        with SimpleConsumer("127.0.0.1", survivor.port, timeout=10) as client:
            topics = client.metadata([TOPIC]).topics
    except (BrokerError, ConnectionClosed, OSError):
        return False
    leaders = topics[0].leaders if topics else ()
    return len(leaders) == partitions and all(leader not in (dead, rq.NO_LEADER) for leader in leaders)


def _restart(args: argparse.Namespace, cluster: SpawnedCluster, victim: SpawnedBroker) -> dict[str, Any]:
    start_s = victim.start(timeout=600)
    started = time.monotonic()
    cluster.wait_in_sync(TOPIC, timeout=600)
    in_sync_s = time.monotonic() - started
    return {"start_s": start_s, "in_sync_s": in_sync_s, "rss_mb": victim.rss_mb(),
            "others_rss_mb": [b.rss_mb() for b in cluster.live() if b is not victim]}


__all__ = ["add_parsers", "run_elections"]
