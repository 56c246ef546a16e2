"""PrometheusMetrics: each project metric name onto its Prometheus series, read back
with prometheus_client's own registry; the names, the docs and the config fields."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kit import FakeClock
from prometheus_client import CollectorRegistry

from kinesis_spout.config import SpoutConfig
from kinesis_spout.config.load import load_config
from kinesis_spout.errors import ConfigError
from kinesis_spout.metrics import InMemoryMetrics, NoopMetrics
from kinesis_spout.observability.endpoint import MetricsEndpoint
from kinesis_spout.observability.names import BY_NAME, MODES, SPECS, Kind
from kinesis_spout.observability.prometheus import PrometheusMetrics

REPO = Path(__file__).resolve().parents[2]
LABELS = {"stream": "orders", "job": "billing"}


@pytest.fixture
def reg() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def prom(reg: CollectorRegistry, fake_clock: FakeClock) -> PrometheusMetrics:
    return PrometheusMetrics(reg, stream="orders", job="billing", clock=fake_clock)


def value(reg: CollectorRegistry, name: str, **labels: str) -> float | None:
    return reg.get_sample_value(name, {**LABELS, **labels})


def test_records_done_are_one_counter_with_disjoint_outcomes(
    prom: PrometheusMetrics, reg: CollectorRegistry
) -> None:
    prom.increment("records_read", 10, shard="s0")
    prom.increment("records_read", 5, shard="s0")
    prom.increment("records_read", 7, shard="s1")
    prom.increment("records_acked", 14, shard="s0")
    prom.increment("records_failed", 3, shard="s0")
    prom.increment("retries", 2, shard="s0")
    prom.increment("dead_lettered", shard="s0")
    prom.increment("records_expired", shard="s1")
    total = "kinesis_spout_records_total"
    assert value(reg, total, shard="s0", outcome="acked") == 14
    assert value(reg, total, shard="s0", outcome="dead_lettered") == 1
    assert value(reg, total, shard="s1", outcome="expired") == 1
    assert value(reg, total, shard="s1", outcome="acked") == 0  # nothing acked there yet
    outcomes = {
        s.labels["outcome"]
        for m in reg.collect()
        if m.name == "kinesis_spout_records"
        for s in m.samples
        if s.name == total
    }
    assert outcomes == {"acked", "dead_lettered", "expired"}  # each record done, once
    assert value(reg, "kinesis_spout_records_read_total", shard="s0") == 15
    assert value(reg, "kinesis_spout_records_read_total", shard="s1") == 7
    assert value(reg, "kinesis_spout_retries_total", shard="s0") == 2
    assert value(reg, "kinesis_spout_failures_total", shard="s0") == 3


def test_no_family_has_a_label_whose_values_overlap() -> None:
    """Names that share a family differ only in fixed label values, and one project name
    is one family's series: a record, an error or a lease event is counted once."""
    by_family: dict[str, list[tuple[tuple[str, str], ...]]] = {}
    for spec in SPECS:
        by_family.setdefault(spec.family, []).append(spec.labels)
    for family, labels in by_family.items():
        assert len(set(labels)) == len(labels), family
        if len(labels) > 1:
            assert all(len(fixed) == 1 for fixed in labels), family
    done = {s.name for s in SPECS if s.family == "kinesis_spout_records_total"}
    assert done == {"records_acked", "dead_lettered", "records_expired"}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_an_endpoint_lists_only_the_metrics_of_its_mode(mode: str) -> None:
    endpoint = MetricsEndpoint("127.0.0.1", 0, stream="orders", job="billing", mode=mode)
    listed = {m.name for m in endpoint.registry.collect() if m.name.startswith("kinesis_spout")}
    expected = {BY_NAME[n].family.removesuffix("_total") for n in MODES[mode]}
    expected |= {BY_NAME[n].deprecated for n in MODES[mode] if BY_NAME[n].deprecated}
    assert listed == expected


def test_the_modes_of_the_endpoints() -> None:
    families = {m: {BY_NAME[n].family for n in names} for m, names in MODES.items()}
    assert "kinesis_spout_lease_events_total" not in families["spout"]
    assert "kinesis_spout_batches_total" not in families["spout"]
    assert families["worker"] - families["spout"] == {
        "kinesis_spout_lease_events_total",
        "kinesis_spout_rebalances_total",
    }
    assert families["spark"] - families["spout"] == {"kinesis_spout_batches_total"}
    assert families["streaming"] == {
        "kinesis_spout_batches_total",
        "kinesis_spout_streaming_input_rows_total",
    }
    with pytest.raises(ValueError, match="mode 'storm'"):
        MetricsEndpoint("127.0.0.1", 0, stream="orders", job="billing", mode="storm")


def test_a_name_outside_the_mode_is_still_exported_from_its_first_report(
    reg: CollectorRegistry,
) -> None:
    prom = PrometheusMetrics(reg, stream="orders", job="billing", names=MODES["spout"])
    assert "kinesis_spout_batches" not in {m.name for m in reg.collect()}
    prom.increment("batches", 2)
    assert value(reg, "kinesis_spout_batches_total") == 2


def test_gauges_in_base_units_and_the_checkpoint_age_grows_until_scraped(
    prom: PrometheusMetrics, reg: CollectorRegistry, fake_clock: FakeClock
) -> None:
    prom.gauge("millis_behind_latest", 2500, shard="s0")
    prom.gauge("in_flight", 42, shard="s0")
    prom.gauge("in_flight", 40, shard="s0")
    assert value(reg, "kinesis_spout_behind_latest_seconds", shard="s0") == 2.5
    assert value(reg, "kinesis_spout_in_flight_records", shard="s0") == 40
    assert value(reg, "kinesis_spout_checkpoint_age_seconds") is None  # no checkpoint yet
    prom.gauge("checkpoint_age_seconds", 1.5)
    assert value(reg, "kinesis_spout_checkpoint_age_seconds") == 1.5
    fake_clock.advance(10)  # no new report: the age at scrape time has grown
    assert value(reg, "kinesis_spout_checkpoint_age_seconds") == 11.5
    prom.gauge("checkpoint_age_seconds", 0.0)  # a checkpoint was just written
    assert value(reg, "kinesis_spout_checkpoint_age_seconds") == 0.0


def test_get_records_latency_is_a_histogram_in_seconds(
    prom: PrometheusMetrics, reg: CollectorRegistry
) -> None:
    for seconds in (0.003, 0.02, 0.02, 0.3, 12.0):
        prom.observe("get_records_seconds", seconds, shard="s0")
    name = "kinesis_spout_get_records_seconds"
    assert value(reg, name + "_count") == 5
    assert value(reg, name + "_sum") == pytest.approx(12.343)
    assert value(reg, name + "_bucket", le="0.005") == 1
    assert value(reg, name + "_bucket", le="0.025") == 3
    assert value(reg, name + "_bucket", le="0.5") == 4
    assert value(reg, name + "_bucket", le="10.0") == 4
    assert value(reg, name + "_bucket", le="+Inf") == 5


def test_errors_throttles_leases_and_batches(
    prom: PrometheusMetrics, reg: CollectorRegistry
) -> None:
    prom.increment("kinesis_throttled", 3, shard="s0")
    prom.increment("kinesis_errors", shard="s0")
    prom.increment("checkpoint_store_errors")  # not of one shard
    prom.increment("dead_letter_errors", shard="s1")
    prom.increment("iterators_expired", shard="s0")
    prom.increment("leases_acquired", 2)
    prom.increment("leases_lost")
    prom.increment("rebalances")
    prom.increment("batches", 4)
    prom.increment("checkpoint_writes", shard="s0")
    assert value(reg, "kinesis_spout_throttles_total", shard="s0") == 3
    errors = "kinesis_spout_errors_total"
    assert value(reg, errors, shard="s0", kind="kinesis") == 1
    assert value(reg, errors, shard="", kind="checkpoint_store") == 1
    assert value(reg, errors, shard="s1", kind="dead_letter") == 1
    assert value(reg, "kinesis_spout_iterators_expired_total", shard="s0") == 1
    assert value(reg, "kinesis_spout_lease_events_total", event="acquired") == 2
    assert value(reg, "kinesis_spout_lease_events_total", event="lost") == 1
    assert value(reg, "kinesis_spout_rebalances_total") == 1
    assert value(reg, "kinesis_spout_batches_total") == 4
    assert value(reg, "kinesis_spout_checkpoint_writes_total", shard="s0") == 1


def test_other_names_are_exported_by_name_and_misuse_is_dropped(
    prom: PrometheusMetrics, reg: CollectorRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    prom.increment("my.own-count", 2, shard="s0")
    prom.gauge("queue depth", 7)
    assert value(reg, "kinesis_spout_my_own_count_total", shard="s0") == 2
    assert value(reg, "kinesis_spout_queue_depth", shard="") == 7
    prom.gauge("records_read", 3, shard="s0")  # a counter cannot be set
    prom.increment("records_acked", -1, shard="s0")  # nor go down
    prom.observe("in_flight", 1.0)
    assert value(reg, "kinesis_spout_records_read_total", shard="s0") == 0  # not set to 3
    assert value(reg, "kinesis_spout_records_total", shard="s0", outcome="acked") == 0
    assert "metric records_read: gauge use of a counter is not exported" in caplog.text
    assert "metric records_acked: a negative increment (-1)" in caplog.text


def test_misuse_after_the_series_exists_is_dropped_too(
    prom: PrometheusMetrics, reg: CollectorRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    prom.increment("records_read", 4, shard="s0")
    prom.gauge("in_flight", 3, shard="s0")
    prom.gauge("records_read", 1, shard="s0")  # a counter's series exists: still not set
    prom.increment("in_flight", 2, shard="s0")  # nor is a gauge's series counted up
    prom.observe("records_read", 9.0, shard="s0")
    assert value(reg, "kinesis_spout_records_read_total", shard="s0") == 4
    assert value(reg, "kinesis_spout_in_flight_records", shard="s0") == 3
    assert "metric records_read: gauge use of a counter is not exported" in caplog.text
    assert "metric in_flight: counter use of a gauge is not exported" in caplog.text


def test_every_name_the_code_reports_is_mapped_and_documented() -> None:
    used: set[str] = set()
    pattern = re.compile(r"\.(?:increment|gauge|observe)\(\s*\"([a-z_]+)\"")
    for path in (REPO / "kinesis_spout").rglob("*.py"):
        used.update(pattern.findall(path.read_text()))
    assert {"records_read", "records_acked", "get_records_seconds", "batches"} <= used
    assert used <= set(BY_NAME), f"not mapped: {sorted(used - set(BY_NAME))}"
    docs = (REPO / "docs" / "metrics.md").read_text()
    for spec in SPECS:
        assert f"`{spec.family}`" in docs, spec.family
        if spec.deprecated:  # kept one release, and said so
            assert f"`{spec.deprecated}` (deprecated" in docs, spec.deprecated
        assert f"`{spec.name}`" in docs, spec.name
        for key, label in spec.labels:
            assert f'`{key}="{label}"`' in docs or f"`{label}`" in docs, (key, label)
    counters = [s for s in SPECS if s.kind is Kind.COUNTER]
    assert all(s.family.endswith("_total") for s in counters)
    assert all(s.family.startswith("kinesis_spout_") for s in SPECS)


def test_the_protocol_has_observe_everywhere() -> None:
    mem = InMemoryMetrics()
    mem.observe("get_records_seconds", 0.5, shard="s0")
    mem.observe("get_records_seconds", 0.25, shard="s1")
    assert sorted(mem.observed("get_records_seconds")) == [0.25, 0.5]
    assert NoopMetrics().observe("get_records_seconds", 1.0) is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (70000, "invalid config metrics_port=70000: a TCP port between 1 and 65535"),
        (-1, "invalid config metrics_port=-1: a TCP port between 1 and 65535"),
        ("http", "invalid config metrics_port='http': expected an integer"),
        (9.5, "invalid config metrics_port=9.5: expected an integer"),
    ],
)
def test_an_invalid_metrics_port_is_a_config_error_naming_the_field(
    value: object, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, env={}, overrides={"metrics_port": value})
    assert str(info.value).startswith(message)
    assert info.value.field == "metrics_port"


def test_metrics_port_from_the_environment_and_defaults() -> None:
    assert SpoutConfig().metrics_port is None  # off by default
    assert SpoutConfig().metrics_host == "127.0.0.1"
    c = load_config(None, env={"KINESIS_SPOUT_METRICS_PORT": "9464"})
    assert c.metrics_port == 9464
    with pytest.raises(ConfigError) as info:
        SpoutConfig(metrics_host=" ")
    assert info.value.field == "metrics_host"


def test_counters_start_at_zero_and_there_is_no_created_series(reg: CollectorRegistry) -> None:
    """``throttles_total``, ``errors_total{kind}`` and ``iterators_expired_total`` had no
    sample until their first event, so ``rate()`` and ``absent()`` alerts could not work;
    every counter carried a ``_created`` series too."""
    prom = PrometheusMetrics(reg, stream="orders", job="billing", names=MODES["spout"])
    assert value(reg, "kinesis_spout_streams_gone_total") == 0
    assert value(reg, "kinesis_spout_get_records_duration_seconds_count") == 0
    assert value(reg, "kinesis_spout_throttles_total", shard="s0") is None  # no shard yet
    prom.gauge("in_flight", 0, shard="s0")  # the shard's first report
    for name, labels in [
        ("kinesis_spout_throttles_total", {}),
        ("kinesis_spout_iterators_expired_total", {}),
        ("kinesis_spout_errors_total", {"kind": "kinesis"}),
        ("kinesis_spout_errors_total", {"kind": "checkpoint_store"}),
        ("kinesis_spout_errors_total", {"kind": "dead_letter"}),
        ("kinesis_spout_records_total", {"outcome": "expired"}),
    ]:
        assert value(reg, name, shard="s0", **labels) == 0, (name, labels)
    prom.increment("kinesis_throttled", shard="s0")
    assert value(reg, "kinesis_spout_throttles_total", shard="s0") == 1
    names = {s.name for m in reg.collect() for s in m.samples}
    assert not [n for n in names if n.endswith("_created")]
    other = prom.for_stream("payments")  # a reader's second stream: its own zeros
    assert (
        reg.get_sample_value(
            "kinesis_spout_streams_gone_total", {"stream": "payments", "job": "billing"}
        )
        == 0
    )
    assert other.stream == "payments"


def test_the_get_records_histogram_keeps_its_old_name_for_one_release(
    prom: PrometheusMetrics, reg: CollectorRegistry
) -> None:
    prom.observe("get_records_seconds", 0.02, shard="s0")
    prom.observe("get_records_seconds", 0.3, shard="s1")
    for name in ("kinesis_spout_get_records_duration_seconds", "kinesis_spout_get_records_seconds"):
        assert value(reg, name + "_count") == 2
        assert value(reg, name + "_bucket", le="0.025") == 1
    helps = {m.name: m.documentation for m in reg.collect()}
    assert helps["kinesis_spout_get_records_seconds"].startswith(
        "Deprecated: kinesis_spout_get_records_duration_seconds is its new name."
    )
