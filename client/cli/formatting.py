"""kcat-style output formats for ``rill consume --format``.

Tokens: ``%s`` payload, ``%S`` payload length, ``%t`` topic, ``%p`` partition,
``%o`` offset (byte position of the message), ``%n`` next offset, ``%k`` key (empty:
the 0.7 format has none), ``%K`` key length (-1 when there is no key), ``%%`` a
percent sign. Escapes: ``\\n \\t \\r \\0 \\\\ \\xHH``.

Each message's output ends with a newline: one is appended unless the format already
ends with one (so kcat's ``'%s\\n'`` and ``'%s'`` print the same).
"""

from __future__ import annotations

from collections.abc import Callable

from rill.client.protocol.messages import Message

__all__ = ["DEFAULT_FORMAT", "OFFSET_FORMAT", "compile_format", "unescape"]

DEFAULT_FORMAT = "%s"
OFFSET_FORMAT = "Partition:%p\\tOffset:%o\\t%s"  # kafka-console-consumer's print.partition/print.offset

_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "0": b"\0", "\\": b"\\"}

_TOKENS: dict[str, Callable[[Message], bytes]] = {
    "s": lambda m: m.value,
    "S": lambda m: str(len(m.value)).encode(),
    "t": lambda m: m.topic.encode(),
    "p": lambda m: str(m.partition).encode(),
    "o": lambda m: str(m.offset).encode(),
    "n": lambda m: str(m.next_offset).encode(),
    "k": lambda m: m.key or b"",
    "K": lambda m: str(-1 if m.key is None else len(m.key)).encode(),
}


def unescape(text: str) -> bytes:
    """Turn ``\\n``-style escapes into bytes; other characters are encoded as UTF-8.

    Raises:
        ValueError: an unknown escape or a bad ``\\xHH``.
    """
    out = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\":
            out += ch.encode()
            i += 1
            continue
        if i + 1 >= len(text):
            raise ValueError("format ends with a lone backslash")
        nxt = text[i + 1]
        if nxt == "x":
            digits = text[i + 2:i + 4]
            if len(digits) != 2 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"bad escape \\x{digits}: expected two hex digits")
            out.append(int(digits, 16))
            i += 4
            continue
        if nxt not in _ESCAPES:
            raise ValueError(f"unknown escape \\{nxt} (known: \\n \\t \\r \\0 \\\\ \\xHH)")
        out += _ESCAPES[nxt]
        i += 2
    return bytes(out)


def _parse(fmt: str) -> list[bytes | str]:
    """Split a format into literal bytes and token letters."""
    parts: list[bytes | str] = []
    literal: list[str] = []
    i = 0
    while i < len(fmt):
        ch = fmt[i]
        if ch != "%":
            literal.append(ch)
            i += 1
            continue
        token = fmt[i + 1:i + 2]
        if token == "%":
            literal.append("%")
        elif token in _TOKENS:
            if literal:
                parts.append(unescape("".join(literal)))
                literal = []
            parts.append(token)
        else:
            shown = f"%{token}" if token else "a lone %"
            raise ValueError(f"unknown format token {shown} (known: %s %S %t %p %o %n %k %K %%)")
        i += 2
    if literal:
        parts.append(unescape("".join(literal)))
    return parts


def compile_format(fmt: str) -> Callable[[Message], bytes]:
    """Return a function rendering one message as bytes, newline included.

    Raises:
        ValueError: an unknown token or escape.
    """
    parts = _parse(fmt)
    if not (parts and isinstance(parts[-1], bytes) and parts[-1].endswith(b"\n")):
        if parts and isinstance(parts[-1], bytes):
            parts[-1] += b"\n"
        else:
            parts.append(b"\n")
    if parts == ["s", b"\n"]:
        return lambda m: m.value + b"\n"
    renderers = [_literal(p) if isinstance(p, bytes) else _TOKENS[p] for p in parts]
    return lambda m: b"".join([render(m) for render in renderers])


def _literal(value: bytes) -> Callable[[Message], bytes]:
    return lambda m: value
