"""Rates over sampled windows, measured as Kafka's Rate over a SampledStat."""

from __future__ import annotations

import pytest

from rill.broker.security.rate_windows import MIN_WINDOW_S, SampledRate, WindowSettings

T0 = 1000.0


def test_a_new_rate_is_divided_by_all_but_one_window() -> None:
    """A burst at the start is spread over num - 1 windows, not over the instant elapsed (Kafka's correction)."""
    rate = SampledRate(WindowSettings(num=11, size_s=1.0))
    rate.record(500.0, T0)
    assert rate.window_s(T0) == pytest.approx(10.0)
    assert rate.measure(T0) == pytest.approx(50.0)
    assert rate.measure(T0 + 0.5) == pytest.approx(500.0 / 10.5)


def test_a_steady_stream_measures_its_rate() -> None:
    """100 units every 0.1 s for 30 s measure 1000 per second once the windows are full."""
    rate = SampledRate(WindowSettings())
    t = T0
    for _ in range(300):
        rate.record(100.0, t)
        t += 0.1
    assert rate.measure(t) == pytest.approx(1000.0, rel=0.1)
    assert 10.0 <= rate.window_s(t) <= 11.0


def test_values_older_than_the_span_no_longer_count() -> None:
    """After num x size seconds without a record, every sample is obsolete and the rate is 0."""
    rate = SampledRate(WindowSettings(num=3, size_s=2.0))
    rate.record(60.0, T0)
    assert rate.measure(T0 + 5.9) > 0
    assert rate.measure(T0 + 6.0) == 0.0
    assert rate.last_recorded == T0


def test_the_oldest_sample_is_reused_when_the_ring_is_full() -> None:
    """With 2 windows of 1 s, the value of the first window drops out when the third starts."""
    rate = SampledRate(WindowSettings(num=2, size_s=1.0))
    rate.record(10.0, T0)
    rate.record(20.0, T0 + 1.0)
    assert rate.measure(T0 + 1.5) == pytest.approx(30.0 / 1.5)
    rate.record(40.0, T0 + 2.0)
    assert rate.measure(T0 + 2.5) == pytest.approx(60.0 / 1.5)


def test_windows_stay_aligned_after_an_idle_gap() -> None:
    """A record 3.4 windows after the last one starts its sample at the boundary (3 windows on), not at the record."""
    rate = SampledRate(WindowSettings(num=11, size_s=1.0))
    rate.record(10.0, T0)
    rate.record(10.0, T0 + 3.4)
    # oldest sample starts at T0; 4.4 s elapsed -> 4 full windows, raised to 10 full + 0.4
    assert rate.window_s(T0 + 4.4) == pytest.approx(10.4)
    rate.record(10.0, T0 + 4.0)  # 4.0 - 3.0 >= 1: a new sample at the boundary 4.0
    assert rate.measure(T0 + 4.0) == pytest.approx(30.0 / 10.0)


def test_a_single_window_rate_never_divides_by_zero() -> None:
    """With one window the elapsed time can be 0; the rate is divided by 1 ms instead."""
    rate = SampledRate(WindowSettings(num=1, size_s=1.0))
    rate.record(1.0, T0)
    assert rate.window_s(T0) == MIN_WINDOW_S
    assert rate.measure(T0 + 0.5) == pytest.approx(2.0)
    rate.record(1.0, T0 + 1.2)
    assert rate.measure(T0 + 1.5) == pytest.approx(1.0 / 0.5)


def test_measuring_an_empty_rate_is_zero() -> None:
    """A rate nothing was recorded into measures 0 over the minimum window."""
    rate = SampledRate(WindowSettings())
    assert rate.measure(T0) == 0.0
    assert rate.window_s(T0) == pytest.approx(10.0)


@pytest.mark.parametrize("num, size", [(0, 1.0), (11, 0.0), (11, -1.0)])
def test_bad_window_settings_are_refused(num: int, size: float) -> None:
    """num below 1 or a size not above 0 raise ValueError naming the setting."""
    with pytest.raises(ValueError, match="quota.window"):
        WindowSettings(num=num, size_s=size)
