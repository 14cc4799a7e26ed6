"""One bash, in a network namespace of its own, that runs a walkthrough's steps in order.

The docs use fixed ports (ZooKeeper on 2181, brokers on 9092...), as a user would: in a
fresh namespace with only loopback up, those ports are free whatever else the machine
(or a parallel test) runs, and every process a step leaves behind is found again by
``ip netns pids`` and killed at the end. Needs root and iproute2, as the
network-partition tests do (CI runs as root; bash .ci/setup installs iproute2).

Each step is written to ``step-<line>.sh`` (or ``.py``) in the working directory and run
by the persistent shell with its output (stdout and stderr) in ``step-<line>.out``; the
shell then reports the step's exit status on a pipe the test reads, bounded by a timeout.
Bash's own notices of a background job killed by a signal (a doc's ``kill -9`` of a broker
it started) are not part of what a step printed.
"""

from __future__ import annotations

import os
import queue
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType

from tests.docs.walkthrough import Step


class StepFailed(AssertionError):
    pass


_JOB_NOTICE = re.compile(r"^.*: line \d+: +\d+ (Killed|Terminated|Hangup|Aborted|Quit)\b.*\n?", re.MULTILINE)


def without_job_notices(printed: str) -> str:
    """``printed`` without the lines in which bash reports a background job killed by a signal
    (``step-243.sh: line 4: 28495 Killed  rill-broker ...``): the shell's, not a command's, output
    (an interactive shell prints them as ``[1]+ Killed ...``, which no doc shows either)."""
    return _JOB_NOTICE.sub("", printed)


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


class ShellSession:
    """A bash in namespace ``rill-doc-<tag>`` working in ``workdir``; use as a context manager."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.namespace = f"rill-doc-{secrets.token_hex(3)}"
        self.proc: subprocess.Popen[str] | None = None
        self.lines: queue.Queue[str | None] = queue.Queue()

    def __enter__(self) -> ShellSession:
        try:
            _ip("netns", "add", self.namespace)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise RuntimeError("the docs' walkthrough tests need root and iproute2 (`ip netns`): bash .ci/setup "
                               f"installs iproute2, and CI runs as root ({exc})") from exc
        _ip("-n", self.namespace, "link", "set", "lo", "up")
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
               "PYTHONUNBUFFERED": "1"}
        env.pop("RILL_BROKER", None)
        self.proc = subprocess.Popen(["ip", "netns", "exec", self.namespace, "bash", "--noprofile", "--norc"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, cwd=self.workdir, env=env, start_new_session=True)
        threading.Thread(target=self._read, name="walkthrough-shell", daemon=True).start()
        return self

    def run(self, step: Step, timeout: float = 180.0) -> str:
        """Run ``step``; return what it printed.

        Raises:
            StepFailed: it exited with another status than ``step.status`` (0 unless the doc
                says ``exit N``), or did not finish (or, in the background, did
                not print its text) within ``timeout`` seconds.
        """
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        suffix = "py" if step.language == "python" else "sh"
        script = self.workdir / f"step-{step.line}.{suffix}"
        script.write_text(step.code)
        out = self.workdir / f"step-{step.line}.out"
        command = f"python3 {script}" if step.language == "python" else f"source {script}"
        if step.background is not None:
            self.proc.stdin.write(f"( {command} ) > {out} 2>&1 &\necho __step_done__ 0\n")
        else:
            self.proc.stdin.write(f"{{ {command} ; }} > {out} 2>&1 < /dev/null; echo __step_done__ $?\n")
        self.proc.stdin.flush()
        status = self._status(step, timeout)
        printed = without_job_notices(out.read_text(errors="replace")) if out.exists() else ""
        if status != step.status:
            raise StepFailed(f"line {step.line}: the step exited with {status}, not {step.status}:\n{step.code}\n"
                             f"it printed:\n{printed}")
        if step.background is not None:
            deadline = time.monotonic() + timeout
            while step.background not in printed:
                if time.monotonic() > deadline:
                    raise StepFailed(f"line {step.line}: {step.background!r} not printed within {timeout:.0f} s:\n"
                                     f"{printed}")
                time.sleep(0.2)
                printed = out.read_text(errors="replace")
        return printed

    def _status(self, step: Step, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                raise StepFailed(f"line {step.line}: the step did not finish within {timeout:.0f} s:\n{step.code}")
            if line is None:
                raise StepFailed(f"line {step.line}: the shell exited")
            if line.startswith("__step_done__ "):
                return int(line.split()[1])

    def _read(self) -> None:
        """The reader thread: the shell's own lines (step outputs go to files) into :attr:`lines`."""
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for _ in range(50):  # every process still in the namespace was started by a step
            pids = [int(p) for p in _ip("netns", "pids", self.namespace).stdout.split()]
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        _ip("netns", "del", self.namespace)
