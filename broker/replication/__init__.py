"""The replication plane: partitions kept on several brokers (seed 002, section 4.7).

- ``replica`` (this broker's copy of a replicated partition and its role) and
  ``replica_manager`` (every replica held here; becoming leader or follower as the
  controller says; the leader's high watermark, ISR proposals and commit waits);
- the leader's side: ``leader_state`` (followers' log ends, the ISR, the high watermark,
  with no I/O), ``leader_reads`` (the answer to REPLICA_FETCH) and ``isr_writer`` (ISR
  changes written to ZooKeeper with a compare-and-set);
- the follower's side: ``replica_fetcher`` and ``fetcher_thread`` (one fetcher thread per
  leader) and ``fetch_block`` (applying one block of the leader's answer);
- the rules, as pure functions: ``divergence`` (leader epochs decide where logs part) and
  ``leader_election`` (the controller's choices).

The controller itself and its gRPC service live in ``rill.broker.cluster``.
"""
