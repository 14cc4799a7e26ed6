"""rill.client."""
