"""A doc's walkthrough as steps to run, and the shape check of what each step printed.

A walkthrough is a Markdown file whose ```` ```sh ```` blocks are commands run in order
in one shell (``cd``, variables and background processes carry over) and whose
``` ```python ``` blocks run with ``python3``. A bare ```` ``` ```` block right after a
command block (only blank lines between) is what that step printed: the test compares
its *shape* with the real output. A block indented inside a list item counts too, its
indentation removed. Directives, in an HTML comment on the line before a block
(invisible when the Markdown is rendered)::

    <!-- walkthrough: skip -->                    not run (an install step, say)
    <!-- walkthrough: background "broker.ready" -->   run in the background; the next
                                                  step waits until its output has the text
    <!-- walkthrough: not run -->                 on an output block: shown, not checked
    <!-- walkthrough: exit 1 -->                  the step must exit with this status (its last
                                                  command is a refusal the doc shows), not 0

Shape: in each line, timestamps, hexadecimal ids and numbers become placeholders, lists
of numbers one placeholder, and runs of blanks one space; the expected and actual lines
must then be the same multiset (order may differ: outputs gathered from several logs or
threads). A line ``...`` in the expected block marks it shortened: then every other
expected line must be among the actual ones, and more may be printed.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import NamedTuple

FENCE = re.compile(r"^( {0,4})```(\w*)\s*$")  # indented: a block inside a list item
DIRECTIVE = re.compile(r"^<!--\s*walkthrough:\s*(.*?)\s*-->\s*$")


class Step(NamedTuple):
    line: int               # 1-based line of the block's opening fence
    language: str           # "sh" or "python"
    code: str
    expected: str | None    # the output block paired with it, if any
    background: str | None  # run in the background until its output contains this text
    skip: bool
    status: int = 0         # the exit status the step must end with


class Block(NamedTuple):
    line: int
    language: str
    text: str
    directive: str
    follows_previous: bool  # only blank lines since the previous block closed


def blocks(markdown: str) -> list[Block]:
    """Every fenced block with its language, text, directive and whether it follows the previous at once."""
    out: list[Block] = []
    lines = markdown.splitlines()
    i, last_close, directive = 0, -10, ""
    while i < len(lines):
        m = DIRECTIVE.match(lines[i].strip())
        if m:
            directive = m.group(1)
            i += 1
            continue
        fence = FENCE.match(lines[i])
        if not fence:
            if lines[i].strip():
                directive = ""  # a directive applies only to the block right after it
            i += 1
            continue
        start, indent = i, fence.group(1)
        i += 1
        body = []
        while i < len(lines) and not lines[i].strip().startswith("```"):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        between = lines[last_close + 1:start] if last_close >= 0 else ["x"]
        follows = all(not line.strip() for line in between)
        out.append(Block(start + 1, fence.group(2), "\n".join(body) + "\n", directive, follows))
        last_close, directive = i, ""
        i += 1
    return out


def steps(markdown: str) -> list[Step]:
    """The runnable steps of ``markdown`` in order.

    Raises:
        ValueError: an output block that follows no command block (a doc must show the
            command whose output it quotes, or mark the block ``not run``), or a
            directive this module does not know (a typo would silently check less).
    """
    out: list[Step] = []
    for block in blocks(markdown):
        if block.language in ("sh", "python"):
            directive = block.directive
            background = re.fullmatch(r'background\s+"(.+)"', directive)
            status = re.fullmatch(r"exit\s+(\d+)", directive)
            if directive not in ("", "skip") and not background and not status:
                raise ValueError(f"line {block.line}: unknown walkthrough directive {directive!r} on a command block")
            out.append(Step(block.line, block.language, block.text, None,
                            background.group(1) if background else None, directive == "skip",
                            int(status.group(1)) if status else 0))
        elif block.language == "" and block.directive not in ("", "not run"):
            raise ValueError(f"line {block.line}: unknown walkthrough directive {block.directive!r} on an output block")
        elif block.language == "" and block.directive != "not run":
            if not (out and block.follows_previous and out[-1].expected is None and out[-1].line < block.line):
                raise ValueError(f"line {block.line}: an output block that follows no command block")
            out[-1] = out[-1]._replace(expected=block.text)
    return out


_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?")
_HEX = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{8,}\b")
_NUMBER = re.compile(r"\d+(\.\d+)?")
_NUMBER_LIST = re.compile(r"([\[{(])\s*N(?:\s*[,:]\s*N)*\s*([\]})])")


def shape(line: str) -> str:
    """``line`` with its variable parts as placeholders (see the module docstring)."""
    line = _TIMESTAMP.sub("T", line)
    line = _HEX.sub("H", line)
    line = _NUMBER.sub("N", line)
    line = _NUMBER_LIST.sub(r"\1N\2", line)
    return " ".join(line.split())


def mismatch(expected: str, actual: str) -> str | None:
    """Why ``actual`` does not have the shape of ``expected`` (None when it does)."""
    want = [shape(line) for line in expected.splitlines() if line.strip()]
    got = Counter(shape(line) for line in actual.splitlines() if line.strip())
    shortened = "..." in want
    want_count = Counter(w for w in want if w != "...")
    missing = want_count - got
    extra = got - want_count
    if missing or (extra and not shortened):
        parts = []
        if missing:
            parts.append("expected but not printed: " + "; ".join(sorted(missing.elements())))
        if extra and not shortened:
            parts.append("printed but not expected: " + "; ".join(sorted(extra.elements())))
        return "\n".join(parts)
    return None
