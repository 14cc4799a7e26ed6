"""The cluster plane: ZooKeeper, the cluster's view of topics, and the hosted group coordinator.

``registration`` (this broker in ZooKeeper, the 0.7 way), ``cluster_view`` (brokers,
topics and where each partition lives), ``coordinator_host`` (the group coordinator's
log and gRPC server), ``admin_servicer`` (the Admin service), ``log_catalog`` (the
coordinator's view of the logs), ``group_placement`` and ``group_checkpoints`` (which
broker coordinates each group, and its checkpoints in ZooKeeper).
"""
