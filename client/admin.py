"""``from rill.client.admin import AdminClient``: the public import path of the gRPC client.

The client lives in rill.client.grpc_client (the consumer heartbeats through it too, so
the module is named for what it is); this path stays for applications and docs/groups.md.
"""

from rill.client.grpc_client import AdminClient, error_name

__all__ = ["AdminClient", "error_name"]
