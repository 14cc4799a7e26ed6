"""``rill-broker --verify-logs [--repair cut|quarantine] [--json]``: check (and repair) a stopped broker's logs.

Prints one line per corrupt range found (file, position, offset, size, reason) and a
summary, or with ``--json`` one JSON object per range and one for the summary. Exit
codes: 0 nothing corrupt (or everything found was repaired), 3 corrupt ranges found
and not repaired, 1 the check could not run (the directory is in use by a running
broker, or a file cannot be read). See docs/operations.md, "Corrupt data on disk".
"""

from __future__ import annotations

import json
import os
import sys
from typing import TextIO

from rill.broker.config import BrokerConfig
from rill.broker.log import repair
from rill.broker.log.loading import lock_directory
from rill.broker.log.verify import Finding, Report, verify_data_dir
from rill.broker.startup_errors import describe_os_error
from rill.client.errors import StorageError

EXIT_CORRUPT = 3


def run(config: BrokerConfig, mode: str | None, as_json: bool, out: TextIO = sys.stdout) -> int:
    data_dir = os.path.realpath(config["log.dir"])
    if not os.path.isdir(data_dir):
        out.write(f"rill-broker: no data directory at {data_dir}\n")
        return 1
    try:
        lock = lock_directory(data_dir)
    except StorageError as exc:
        out.write(f"rill-broker: {exc}: stop the broker first\n")
        return 1
    try:
        report = verify_data_dir(data_dir, config.log_config())
        repaired = _repair(report.findings, mode, config, out, as_json) if mode else []
    except OSError as exc:
        out.write(f"rill-broker: {describe_os_error(exc)}\n")
        return 1
    finally:
        os.close(lock)
    _print(report, repaired, out, as_json)
    if not report.findings or (mode and len(repaired) == len(report.findings)):
        return 0
    return EXIT_CORRUPT


def _repair(findings: list[Finding], mode: str, config: BrokerConfig, out: TextIO, as_json: bool) -> list[Finding]:
    """Repair each finding (a cut ends its partition: later findings there are gone with it)."""
    done: list[Finding] = []
    cut_dirs: set[str] = set()
    for finding in findings:
        if finding.directory in cut_dirs:
            done.append(finding)
            continue
        try:
            if mode == "cut" or not finding.valid_after:
                side = repair.cut(finding, config.log_config())
                cut_dirs.add(finding.directory)
            else:
                side = repair.quarantine(finding, config.log_config())
        except repair.RepairError as exc:
            out.write(json.dumps({"error": str(exc), "file": finding.corrupt.path}) + "\n" if as_json
                      else f"NOT REPAIRED {finding.corrupt.path} position {finding.corrupt.start}: {exc}\n")
            continue
        done.append(finding)
        if not as_json:
            action = "cut" if finding.directory in cut_dirs else "quarantined"
            out.write(f"{action.upper()} {finding.corrupt.path} position {finding.corrupt.start}; "
                      f"the bytes are kept in {side}\n")
    return done


def _print(report: Report, repaired: list[Finding], out: TextIO, as_json: bool) -> None:
    for finding in report.findings:
        c = finding.corrupt
        if as_json:
            out.write(json.dumps({"file": c.path, "position": c.start, "offset": c.offset, "bytes": c.length,
                                  "reason": c.reason, "valid_after": finding.valid_after,
                                  "repaired": finding in repaired}) + "\n")
        else:
            out.write(finding.describe() + "\n")
    if as_json:
        out.write(json.dumps({"partitions": report.partitions, "segments": report.segments,
                              "bytes": report.bytes_checked, "corrupt_ranges": len(report.findings),
                              "repaired": len(repaired), "seconds": round(report.seconds, 3)}) + "\n")
        return
    out.write(report.summary() + "\n")
    if report.findings and not repaired:
        out.write("repair with --repair quarantine (the range becomes filler consumers skip; later data stays) "
                  "or --repair cut (the partition ends there); removed bytes are kept in side files\n")
