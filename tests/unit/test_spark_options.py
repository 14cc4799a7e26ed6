"""The rill source's option parsing (no Spark, no broker): Spark's Kafka option names and meanings."""

from __future__ import annotations

import pytest

from rill.client.spark.options import LATEST, SourceOptionError, parse_read_options
from rill.client.spark.offset_options import parse_offsets

BASE = {"bootstrap": "localhost:9092", "subscribe": "t"}


def parse(streaming: bool | None = False, **options: str):  # type: ignore[no-untyped-def]
    return parse_read_options({**BASE, **options}, streaming=streaming)


def test_spark_defaults() -> None:
    """Defaults are Spark's: failOnDataLoss true, no trigger caps, maxTriggerDelay 15 minutes, strategy error."""
    opts = parse(True)
    assert (opts.fail_on_data_loss, opts.max_offsets_per_trigger, opts.max_bytes_per_trigger,
            opts.min_offsets_per_trigger, opts.max_trigger_delay_ms, opts.time_strategy) == (
        True, None, None, None, 15 * 60 * 1000, "error")
    assert opts.starting.default == LATEST and opts.starting_times is None


def test_new_options_parse() -> None:
    """Each new option gets its typed value; startingTimestamp wins over startingOffsetsByTimestamp (Spark's order)."""
    opts = parse(True, failOnDataLoss="FALSE", maxOffsetsPerTrigger="100", maxBytesPerTrigger="4096",
                 minOffsetsPerTrigger="10", maxTriggerDelay="30s", maxRecordsPerPartition="500",
                 startingTimestamp="1700000000000", startingOffsetsByTimestamp='{"t": {"0": 5}}',
                 startingOffsetsByTimestampStrategy="latest", includeHeaders="false")
    assert (opts.fail_on_data_loss, opts.max_offsets_per_trigger, opts.max_bytes_per_trigger,
            opts.min_offsets_per_trigger, opts.max_trigger_delay_ms, opts.max_records_per_partition,
            opts.time_strategy) == (False, 100, 4096, 10, 30_000, 500, "latest")
    assert opts.starting_times is not None and opts.starting_times.time_for("t", 3) == 1700000000000
    batch = parse(endingOffsetsByTimestamp='{"t": {"1": 7}}')
    assert batch.ending_times is not None
    assert (batch.ending_times.time_for("t", 1), batch.ending_times.time_for("t", 0)) == (7, None)
    assert parse(endingTimestamp="9").ending_times.time_for("t", 0) == 9  # type: ignore[union-attr]


def test_kafka_aliases() -> None:
    """kafka.bootstrap.servers and kafka.max.partition.fetch.bytes name bootstrap and fetchBytes; a conflict fails."""
    opts = parse_read_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                               "kafka.max.partition.fetch.bytes": "1024"}, streaming=False)
    assert (opts.bootstrap, opts.fetch_bytes) == ("h:1", 1024)
    with pytest.raises(SourceOptionError, match="same setting"):
        parse(fetchBytes="1", **{"kafka.max.partition.fetch.bytes": "2"})


@pytest.mark.parametrize("streaming, options, message", [
    (False, {"startingOffsets": "latest"}, "can't be latest for batch queries"),
    (False, {"startingOffsets": '{"t": {"0": -1}}'}, "must be >= 0 or -2 (earliest)"),
    (False, {"maxOffsetsPerTrigger": "5"}, "for streaming reads only"),
    (False, {"minOffsetsPerTrigger": "5"}, "for streaming reads only"),
    (True, {"endingTimestamp": "5"}, "for batch reads only"),
    (True, {"endingOffsets": "latest"}, "for batch reads only"),
    (None, {"includeHeaders": "true"}, "no record headers"),
    (None, {"failOnDataLoss": "maybe"}, "must be true or false"),
    (None, {"maxTriggerDelay": "soon"}, "must be a duration"),
    (None, {"startingTimestamp": "yesterday"}, "milliseconds since the epoch"),
    (None, {"startingOffsetsByTimestamp": '{"t": {"0": -5}}'}, "must be ms since the epoch"),
    (None, {"startingOffsetsByTimestampStrategy": "wait"}, "must be error or latest"),
    (None, {"maxOffsetsPerTrigger": "0"}, "must be > 0"),
    (None, {"bogus": "1"}, "unknown option(s) bogus"),
])
def test_bad_options(streaming: bool | None, options: dict[str, str], message: str) -> None:
    """A bad option fails with one message naming it; options of the other kind of read fail once it is known."""
    with pytest.raises(SourceOptionError) as failure:
        parse(streaming, **options)
    assert message in str(failure.value)


def test_unknown_kind_defers_mode_checks() -> None:
    """At load(), before Spark says batch or stream, latest starts and stream-only options pass."""
    parse(None, startingOffsets="latest", maxOffsetsPerTrigger="5", endingOffsets="latest")


def test_ending_earliest_error_lists_only_what_is_allowed() -> None:
    """endingOffsets=earliest is refused without naming earliest as allowed."""
    with pytest.raises(SourceOptionError) as failure:
        parse_offsets("endingOffsets", "earliest", LATEST, allow_earliest=False)
    assert "use 'latest' or JSON" in str(failure.value)
    with pytest.raises(SourceOptionError) as json_failure:
        parse_offsets("endingOffsets", '{"t": {"0": -2}}', LATEST, allow_earliest=False)
    assert str(json_failure.value).endswith("must be >= 0 or -1 (latest)")


def test_cli_reports_rills_message_from_a_spark_error() -> None:
    """rill spark load/audit print rill's own last error line from the text of a Spark exception."""
    from rill.client.cli.spark_errors import expected_failure, spark_message

    text = ("[PYTHON_DATA_SOURCE_ERROR] Failed to plan: Traceback (most recent call last):\n  File \"x.py\"\n"
            "rill.client.spark.data_loss.DataLossError: t-0: offsets [0, 10) were deleted\n")
    assert spark_message(text) == "t-0: offsets [0, 10) were deleted"
    failure = expected_failure(PermissionError(13, "Permission denied", "/out"), "load")
    assert failure is not None and str(failure) == "cannot use /out: Permission denied"
    assert expected_failure(TypeError("a bug"), "load") is None
