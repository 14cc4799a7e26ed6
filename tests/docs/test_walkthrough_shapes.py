"""The walkthrough parser and shape check (tests/docs/walkthrough.py) on small documents."""

from __future__ import annotations

import pytest

from tests.docs.walkthrough import mismatch, shape, steps

DOC = """# Title

<!-- walkthrough: skip -->
```sh
bash .ci/setup
```

<!-- walkthrough: background "ready" -->
```sh
server --port 9092
```

```sh
client --count 3
```

```
sent 3 messages to [0, 1, 2] at 2026-11-26T05:03:51.602744Z
```

<!-- walkthrough: not run -->
```
an output shown for a command the prose names
```

```python
print("hi")
```
"""


def test_steps_pair_outputs_and_read_directives() -> None:
    got = steps(DOC)
    assert [(s.language, s.skip, s.background) for s in got] == [
        ("sh", True, None), ("sh", False, "ready"), ("sh", False, None), ("python", False, None)]
    assert got[2].code == "client --count 3\n"
    assert got[2].expected == "sent 3 messages to [0, 1, 2] at 2026-11-26T05:03:51.602744Z\n"
    assert got[1].expected is None and got[3].expected is None


def test_an_output_block_after_prose_without_a_command_is_refused() -> None:
    doc = "```sh\nls\n```\n\nSome prose.\n\n```\nout\n```\n"
    with pytest.raises(ValueError, match="line 7: an output block that follows no command block"):
        steps(doc)


def test_shape_hides_numbers_times_ids_and_number_lists() -> None:
    assert shape("a  2026-11-26T05:03:51.6Z\tb=12 c=0.003 [0, 1, 2] {0: 25, 1: 10} id=3f9a0c1e2b4d") == \
        "a T b=N c=N [N] {N} id=H"
    assert shape("events-0: 5") == shape("events-3: 17")


def test_mismatch_compares_multisets_of_shapes() -> None:
    assert mismatch("x 1\ny 2\n", "y 5\nx 9\n") is None
    assert "expected but not printed: z N" in (mismatch("x 1\nz 2\n", "x 1\ny 2\n") or "")
    assert "printed but not expected: y N" in (mismatch("x 1\n", "x 1\ny 2\n") or "")


def test_a_shortened_output_needs_only_its_lines() -> None:
    assert mismatch("x 1\n...\nz 3\n", "x 1\ny 2\nz 3\nw 4\n") is None
    assert mismatch("x 1\n...\nz 3\n", "x 1\ny 2\n") is not None
