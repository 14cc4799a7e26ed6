"""``rill console`` as a user runs it: a process that prints its URL, serves, and stops on Ctrl-C; its usage errors."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import httpx
import pytest

from rill.broker.testing import RunningBroker
from rill.client.cli.main import main


def test_rill_console_prints_its_url_serves_the_cluster_and_stops_on_ctrl_c(module_broker: RunningBroker) -> None:
    """The process prints ``serving http://127.0.0.1:PORT/`` on stderr, its brokers page names the broker, and
    SIGINT ends it with status 130 after a clean shutdown."""
    process = subprocess.Popen([sys.executable, "-m", "rill.client.cli.main", "console", "--bootstrap-server",
                                module_broker.address, "--port", "0"], stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert process.stderr is not None
        printed = [process.stderr.readline()]  # bounded by the test's timeout (pytest-timeout)
        while not printed[-1].startswith("rill console: serving") and printed[-1] and len(printed) < 20:
            printed.append(process.stderr.readline())  # a warning first would not hide the URL
        line = printed[-1]
        assert line.startswith("rill console: serving http://127.0.0.1:") and module_broker.address in line, printed
        url = line.split()[3]
        page = httpx.get(url, timeout=10)
        assert page.status_code == 200 and f"{module_broker.host}:{module_broker.port}" in page.text
        assert httpx.get(url + "api/brokers", timeout=10).json()["controller"] == module_broker.broker_id
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=15) == 130
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_rill_console_refuses_a_taken_port_and_a_window_shorter_than_the_refresh(
        module_broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """Both are one ``rill: error`` line and an exit status, before anything is served."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["console", "--bootstrap-server", module_broker.address, "--port", str(port)]) == 1
        assert f"rill: error: cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
    assert main(["console", "--bootstrap-server", module_broker.address, "--refresh-seconds", "5",
                 "--lag-window-seconds", "1"]) == 2
    assert "--lag-window-seconds must be at least --refresh-seconds" in capsys.readouterr().err
