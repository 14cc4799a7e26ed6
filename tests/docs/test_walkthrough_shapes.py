"""The walkthrough parser and shape check (tests/docs/walkthrough.py) on small documents."""

from __future__ import annotations

import pytest

from tests.docs.shell_session import without_job_notices
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


def test_an_exit_directive_sets_the_status_a_step_must_end_with() -> None:
    doc = "<!-- walkthrough: exit 1 -->\n```sh\nrill topics create --topic big\n```\n\n```\nrill: error: no\n```\n\n" \
          "```sh\nls\n```\n"
    got = steps(doc)
    assert [s.status for s in got] == [1, 0]
    assert got[0].expected == "rill: error: no\n"


def test_blocks_indented_in_a_list_item_are_steps_too() -> None:
    doc = ("- **Producers go on.**\n\n  ```sh\n  python produce.py outage 30\n  ```\n"
           "  ```\n  30 messages sent\n  ```\n- Next.\n")
    got = steps(doc)
    assert [(s.code, s.expected) for s in got] == [("python produce.py outage 30\n", "30 messages sent\n")]


def test_the_shells_notices_of_killed_jobs_are_not_output() -> None:
    printed = ("demo's coordinator is broker 1\n/tmp/w/step-243.sh: line 4: 28495 Killed                  "
               "rill-broker --broker-id $i > broker-$i.log 2>&1\nTOPIC\tPARTITION\n")
    assert without_job_notices(printed) == "demo's coordinator is broker 1\nTOPIC\tPARTITION\n"


@pytest.mark.parametrize("directive", ["exit1", 'backgrond "ready"', "not-run"])
def test_an_unknown_directive_is_refused(directive: str) -> None:
    doc = f"<!-- walkthrough: {directive} -->\n```sh\nls\n```\n"
    with pytest.raises(ValueError, match="unknown walkthrough directive"):
        steps(doc)
