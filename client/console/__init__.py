"""``rill console``: a web console of a rill cluster, built on the client library (docs/console.md).

Brokers and their roles, topics and partitions with their append rates, a message
browser, consumer groups with their lag charted over time, and a rewind form that shows
the plan before anything moves. It reaches the cluster only through rill's own clients
(:mod:`rill.client.console.cluster_access`); the ``rill console`` command
(rill.client.cli.console_command) serves it.

    from rill.client.console import ConsoleServer, ConsoleSettings, create_app
"""

from rill.client.console.cluster_access import ClusterAccess
from rill.client.console.console_app import ConsoleSettings, create_app
from rill.client.console.console_server import ConsoleServer

__all__ = ["ClusterAccess", "ConsoleServer", "ConsoleSettings", "create_app"]
