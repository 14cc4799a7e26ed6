"""rill.broker: the broker process (broker, main, config) and its three planes: dataplane/, cluster/ and log/ (storage)."""
