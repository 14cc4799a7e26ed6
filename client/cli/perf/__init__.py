"""``rill perf``: benchmarks of the broker, the coordinator and the client APIs.

One module per harness, named for what it measures:

- :mod:`.broker_throughput`: ``produce`` (broker ingest with pipelined, pre-encoded
  acknowledged produces) and ``consume`` (read and CRC-check every message).
- :mod:`.produce_latency`: ``latency``, the round trip of single-message acknowledged
  produces, one at a time.
- :mod:`.crc_speed`: ``crc``, crcmod's CRC-32 against zlib's.
- :mod:`.coordinator_calls`: ``commits`` and ``heartbeats`` against the gRPC group
  coordinator; :mod:`.rebalance`: ``rebalance``, how long a group takes to rebalance.
- :mod:`.producer_api`: ``producer-api``, the Producer API's send() and send_many().
- :mod:`.poll_consumer`: ``consumer-api`` and ``e2e``, the poll() consumer's
  throughput and produce-to-poll latency.
- :mod:`.commit_modes` and :mod:`.rebalance_modes`: ``commit-modes`` and
  ``rebalance-modes``, the native coordinator against ZooKeeper (0.7) mode in one run.
- :mod:`.broker_limits`: ``connections``, ``large-requests``, ``partitions`` and
  ``scrub``, on brokers of their own.
- :mod:`.replication`, :mod:`.failover` and :mod:`.elections`: ``replication`` (acks=all
  against acks=append, replication lag, acks=all latency), ``failover`` (unavailability
  after kill -9 or SIGTERM of a leader) and ``elections`` (many partitions losing a
  broker; start-up and RSS of a broker following them), on a cluster of their own with
  its own ZooKeeper; :mod:`.partition_moves`: ``reassignment``, the time to move a full
  partition under a replication throttle and the acks=all latency meanwhile.
- :mod:`.group_failover` (with its worker processes, :mod:`.group_failover_members`) and
  :mod:`.group_commit_ratio`: ``group-failover`` (how long consumer groups stall after
  kill -9 of their coordinator, and whether acknowledged commits survive) and
  ``group-commits`` (commit throughput with groups on ``__rill_groups`` against a
  standalone broker's local log, alternating), on a cluster of their own.
- :mod:`.security_overhead`: ``security``, produce, consume and e2e over TLS against
  plaintext (two listeners of one broker) and with 100 ACLs against the authorizer off,
  alternating, as ratios; on brokers of its own.
- :mod:`.metrics_overhead`: ``metrics``, produce, consume and e2e with Prometheus metrics
  on (and scraped every 15 s of benchmark time) against off, alternating, as ratios; on
  brokers of its own. :mod:`.scrape_cost`: ``scrape``, scrape time, series and size of
  ``/metrics`` with 1,000 and 10,000 partitions, and the stall of another process's
  requests meanwhile (measured by the worker process :mod:`.loop_probe`).

The harnesses share :mod:`.report` (figures as text or ``--json``, percentiles),
:mod:`.broker_requests` (data-plane arguments, topic, pre-encoded produces),
:mod:`.group_members`, :mod:`.commit_client`, :mod:`.mode_comparison`, :mod:`.cluster_setup`,
:mod:`.side_by_side` (two sides compared in alternating rounds, as ratios) and
:mod:`.metrics_scrape` (scraping ``/metrics``). Imports go one
way: :mod:`.command` (the ``rill perf`` dispatcher) imports the harnesses, the harnesses
import the shared helpers, and nothing imports back.

Figures go to stderr as text, or to stdout as one JSON object with ``--json``. Every
report ends with the command that produced it. MB means 10^6 bytes.
"""

from __future__ import annotations

from rill.client.cli.perf.command import add_parser

__all__ = ["add_parser"]
