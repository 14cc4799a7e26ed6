"""rill.broker."""
