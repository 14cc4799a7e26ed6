"""rill.coordinator: server-side group coordination (group state machine, assignors,
offset store, gRPC servicers). Nothing here yet: the broker coordinates no groups
until the coordinator work lands."""
