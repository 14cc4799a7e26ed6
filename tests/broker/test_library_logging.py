"""The client library prints nothing of its own: its events go to `logging`, silent until the application asks.

Each case runs an application script in a fresh interpreter (nothing configured but what
the script does) against a real broker: its stdout must hold only what it printed itself.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from rill.broker.testing import RunningBroker

APP = """
import sys
{setup}
from rill.client import Consumer, Producer

bootstrap = sys.argv[1]
with Producer(bootstrap_servers=bootstrap, client_id="app") as producer:
    for n in range(10):
        producer.send("quiet", b"m%d" % n)
    producer.flush()
consumer = Consumer(bootstrap_servers=bootstrap, group_id="quiet-app", auto_offset_reset="earliest")
consumer.subscribe(["quiet"])
got = []
for _ in range(50):
    got.extend(consumer.poll(0.2))
    if len(got) >= 10:
        break
consumer.commit()
consumer.close()
print("read", len(got))
"""


def run_app(broker: RunningBroker, tmp_path: Path, setup: str = "") -> subprocess.CompletedProcess[str]:
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(APP.format(setup=setup)))
    return subprocess.run([sys.executable, str(script), f"{broker.host}:{broker.port}"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)


def test_an_application_that_configures_nothing_sees_only_its_own_output(broker: RunningBroker,
                                                                         tmp_path: Path) -> None:
    done = run_app(broker, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "read 10\n"
    assert done.stderr == ""


def test_logging_configured_by_the_application_shows_rills_events_with_their_fields(broker: RunningBroker,
                                                                                   tmp_path: Path) -> None:
    done = run_app(broker, tmp_path, "import logging\nlogging.basicConfig(level=logging.DEBUG, stream=sys.stderr, "
                                     "format='%(levelname)s %(name)s %(message)s %(event)s')")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "read 10\n"  # still nothing on stdout
    lines = done.stderr.splitlines()
    committed = [line for line in lines if " consumer.committed " in line]
    assert committed and committed[0].startswith("DEBUG rill.client.consumer.group_client consumer.committed ")
    assert "partitions=" in committed[0] and committed[0].endswith(" consumer.committed")  # record.event


def test_the_rill_logger_alone_can_be_turned_on(broker: RunningBroker, tmp_path: Path) -> None:
    done = run_app(broker, tmp_path, "import logging\nhandler = logging.StreamHandler(sys.stderr)\n"
                                     "logging.getLogger('rill').addHandler(handler)\n"
                                     "logging.getLogger('rill').setLevel(logging.INFO)")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "read 10\n"
    assert done.stderr and all(not line.startswith(" ") for line in done.stderr.splitlines())
    assert not any(" consumer.committed " in line for line in done.stderr.splitlines())  # debug: below INFO
