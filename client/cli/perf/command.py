"""``rill perf``: the subcommand that dispatches to every benchmark harness of this package.

It imports the harnesses (each module adds its benchmarks with ``add_parsers``); they
import only the shared helpers (:mod:`~rill.client.cli.perf.report`,
:mod:`~rill.client.cli.perf.broker_requests`, :mod:`~rill.client.cli.perf.group_members`,
:mod:`~rill.client.cli.perf.commit_client`, :mod:`~rill.client.cli.perf.mode_comparison`,
:mod:`~rill.client.cli.perf.side_by_side`, :mod:`~rill.client.cli.perf.metrics_scrape`),
never this module.
"""

from __future__ import annotations

import argparse

from rill.client.cli.perf import (broker_limits, broker_throughput, commit_modes, coordinator_calls, crc_speed,
                                  poll_consumer, produce_latency, producer_api, rebalance, rebalance_modes,
                                  elections, failover, group_commit_ratio, group_failover, partition_moves,
                                  metrics_overhead, replication, scrape_cost, security_overhead)

HARNESSES = (  # in the order ``rill perf --help`` lists their benchmarks
    broker_throughput,  # produce, consume
    produce_latency,  # latency
    crc_speed,  # crc
    coordinator_calls,  # commits, heartbeats
    rebalance,  # rebalance
    producer_api,  # producer-api
    poll_consumer,  # consumer-api, e2e
    commit_modes,  # commit-modes
    rebalance_modes,  # rebalance-modes
    broker_limits,  # connections, partitions, large-requests, scrub
    replication,  # replication
    failover,  # failover
    elections,  # elections
    partition_moves,  # reassignment
    group_failover,  # group-failover
    group_commit_ratio,  # group-commits
    security_overhead,  # security
    metrics_overhead,  # metrics
    scrape_cost,  # scrape
)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``rill perf`` and every benchmark under it."""
    p = subparsers.add_parser("perf", help="benchmarks: produce, consume, latency, crc, commits, heartbeats, rebalance, "
                                              "consumer-api, e2e, producer-api, commit-modes, rebalance-modes, "
                                              "connections, large-requests, partitions, scrub, replication, "
                                              "failover, elections, reassignment, group-failover, group-commits, "
                                              "security, metrics, scrape",
                              description="Benchmarks. Each prints its figures and the command that produced them.")
    kinds = p.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for harness in HARNESSES:
        harness.add_parsers(kinds)


__all__ = ["HARNESSES", "add_parser"]
