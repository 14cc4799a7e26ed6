"""The cluster plane: ZooKeeper, the cluster's view of topics, and the hosted group coordinator.

``registration`` (this broker in ZooKeeper, the 0.7 way), ``cluster_view`` (brokers,
topics and where each partition lives), ``coordinator_host`` (the group coordinator's
log and gRPC server), ``admin_servicer`` (the Admin service), ``log_catalog`` (the
coordinator's view of the logs), ``group_log_placement`` (a group's coordinator is the
leader of its partition of ``__rill_groups``), ``group_partition_log``, ``groups_topic`` and
``group_import`` (that topic: writing it, creating it, upgrading into it), the controller and
its mixins (elections, reassignment, topic deletion, partition growth, ISR exits).
"""
