"""What ``rill.client`` itself offers: the producer and the consumer at the top of the package."""

from __future__ import annotations

import subprocess
import sys

import rill.client
from rill.client.consumer import Consumer as ConsumerClass
from rill.client.producer import Producer as ProducerClass


def test_producer_and_consumer_import_from_rill_client() -> None:
    from rill.client import Consumer, Producer

    assert Consumer is ConsumerClass and Producer is ProducerClass
    assert {"Consumer", "Producer"} <= set(rill.client.__all__)


def test_consumer_imports_from_rill_client_in_a_fresh_interpreter() -> None:
    """No import cycle when ``rill.client`` is the first thing imported."""
    code = ("from rill.client import Consumer; import rill.client.consumer.consumer as c; "
            "assert Consumer is c.Consumer")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
