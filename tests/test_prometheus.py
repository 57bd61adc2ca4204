"""The Prometheus collector on literal API answers: queries, parsing, catch-up windows."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.dcgm import FIELDS
from collector.nodenames import NodeNames
from collector.prometheus import PrometheusSource, field_queries
from collector.promjson import PrometheusResultError, parse_results, read_results
from warehouse.schema import SCHEMAS

T0 = datetime(2026, 11, 2, 12, 0)
E0 = 1793620800  # T0 as Unix seconds


def labels(name, node="gpu001", gpu="0", **extra):
    return {"__name__": name, "Hostname": node, "gpu": gpu, "UUID": f"GPU-{node}-{gpu}",
            "instance": f"{node}:9400", "job": "dcgm", **extra}


def fid(column):
    return next(i for i, f in enumerate(FIELDS) if f.column == column)


def empty():
    return [[] for _ in FIELDS]


def test_one_query_per_field_with_selector():
    qs = field_queries('job="dcgm"')
    assert len(qs) == len(FIELDS)
    assert 'DCGM_FI_DEV_GPU_TEMP{job="dcgm"}' in qs
    assert ('{__name__=~"DCGM_FI_DEV_CLOCKS_EVENT_REASONS|DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"'
            ',job="dcgm"}') in qs
    assert "DCGM_FI_DEV_GPU_TEMP" in field_queries("")


def test_vector_and_matrix_answers():
    res = empty()
    res[fid("temp_c")] = [
        {"metric": labels("DCGM_FI_DEV_GPU_TEMP"), "value": [E0, "61"]},
        {"metric": labels("DCGM_FI_DEV_GPU_TEMP", gpu="1"), "value": [E0, "NaN"]},
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "instance": "10.0.0.9:9400",
                    "gpu": "0"}, "value": [E0, "40"]},
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "Hostname": "x"}, "value": [E0, "1"]},
    ]
    res[fid("energy_j")] = [{"metric": labels("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),
                             "value": [E0, "5000"]}]
    res[fid("throttle_mask")] = [
        {"metric": labels("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"), "value": [E0, "4"]},
        {"metric": labels("DCGM_FI_DEV_CLOCKS_EVENT_REASONS"), "value": [E0, "64"]},
    ]
    rows = {(r["node"], r["gpu_index"]): r for r in parse_results(res).to_pylist()}
    assert set(rows) == {("gpu001", 0), ("gpu001", 1), ("10.0.0.9", 0)}
    g = rows[("gpu001", 0)]
    assert g["ts"] == T0 and g["temp_c"] == 61 and g["energy_j"] == 5.0
    assert g["throttle_thermal"] is True and g["throttle_power"] is False  # new name wins
    assert rows[("gpu001", 1)]["temp_c"] is None

    matrix = empty()
    matrix[fid("power_w")] = [{"metric": labels("DCGM_FI_DEV_POWER_USAGE"),
                               "values": [[E0, "300.5"], [E0 + 15, "310"], [E0 + 30, "320"]]}]
    t = parse_results(matrix, node_label="instance")
    assert t["ts"].to_pylist() == [T0 + timedelta(seconds=s) for s in (0, 15, 30)]
    assert t["power_w"].to_pylist() == [300.5, 310, 320]
    assert set(t["node"].to_pylist()) == {"gpu001:9400"}


class FakeClient:
    """Answers like Prometheus holding one GPU sampled every 15 s; can be 'down'."""

    def __init__(self):
        self.down = False
        self.calls = []

    def _series(self, times):
        return [{"metric": labels("DCGM_FI_DEV_GPU_TEMP"),
                 "values": [[t, "50"] for t in times]}]

    def custom_query(self, query, params=None):
        self.calls.append(("query", query))
        if self.down:
            raise ConnectionError("connection refused")
        t = float(params["time"])
        return self._series([t])[:1] if "GPU_TEMP" in query else []

    def custom_query_range(self, query, start_time, end_time, step):
        self.calls.append(("range", query, start_time, end_time))
        if self.down:
            raise ConnectionError("connection refused")
        if "GPU_TEMP" not in query:
            return []
        s, e = int(start_time.timestamp()), int(end_time.timestamp())
        return self._series(list(range(s, e + 1, 15)))


def test_catch_up_after_an_outage_in_chunks():
    client = FakeClient()
    src = PrometheusSource(client, interval_s=15, resume_from=T0, chunk_s=300,
                           max_catchup_s=3600, now=lambda: T0 + timedelta(hours=1),
                           pull="query")
    assert src.window(T0) is None  # nothing new
    assert src.window(T0 + timedelta(seconds=15)) == (T0 + timedelta(seconds=15),) * 2
    client.down = True
    with pytest.raises(ConnectionError):
        src.collect(T0 + timedelta(seconds=15))
    assert src.cursor == T0  # a failed cycle moves nothing
    client.down = False
    now = T0 + timedelta(minutes=12)
    seen = []
    while True:
        b = dict(src.collect(now))
        seen += b["samples"]["ts"].to_pylist()
        if src.caught_up:
            break
    expected = [T0 + timedelta(seconds=15 * k) for k in range(1, 49)]
    assert seen == expected  # every step once, in 300-s chunks
    assert sum(1 for c in client.calls if c[0] == "range") == 3 * len(FIELDS)
    # too long an outage: only max_catchup_s back
    late = T0 + timedelta(hours=5)
    start, _ = src.window(late)
    assert start == late - timedelta(hours=1)


# ----------------------------------------------- refusals, MIG, names (issue 12)


def test_a_gpu_label_of_70000_is_refused_not_wrapped_onto_gpu_4464():
    res = empty()
    res[fid("temp_c")] = [
        {"metric": labels("DCGM_FI_DEV_GPU_TEMP", gpu="70000"), "value": [E0, "61"]},
        {"metric": labels("DCGM_FI_DEV_GPU_TEMP", gpu="32"), "value": [E0, "61"]},
        {"metric": labels("DCGM_FI_DEV_GPU_TEMP", gpu="٣"), "value": [E0, "61"]},
        {"metric": labels("DCGM_FI_DEV_GPU_TEMP", gpu="3"), "value": [E0, "62"]},
    ]
    counts = Counter()
    t = parse_results(res, counts=counts)
    assert t["gpu_index"].to_pylist() == [3] and t["temp_c"].to_pylist() == [62]
    assert counts == {"row: gpu label not a GPU index 0-31": 3}


def test_malformed_series_and_points_cost_themselves_and_are_counted():
    good = {"metric": labels("DCGM_FI_DEV_GPU_TEMP"), "value": [E0, "61"]}
    res = empty()
    res[fid("temp_c")] = [
        "not a series", {"value": [E0, "1"]}, {"metric": labels("DCGM_FI_DEV_GPU_TEMP", gpu="1")},
        {"metric": labels("DCGM_FI_DEV_GPU_TEMP", gpu="2"),
         "values": [[E0, "1"], [E0 + 15], [1e300, "2"], [E0 + 30, "x"], [E0 + 45, None]]},
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "4"}, "value": [E0, "1"]},
        good,
    ]
    res[fid("xid_last")] = [{"metric": labels("DCGM_FI_DEV_XID_ERRORS"),
                             "value": [E0, "4294967295"]}]
    counts = Counter()
    rows = {(r["gpu_index"], r["ts"]): r for r in parse_results(res, counts=counts).to_pylist()}
    assert set(rows) == {(0, T0), (2, T0)}
    assert rows[(0, T0)]["temp_c"] == 61 and rows[(0, T0)]["xid_last"] is None
    assert counts == {
        "series: not an object with a metric object": 2,
        "series: no value or values list": 1,
        "series: point not [time, value]": 1,
        "series: time not a Unix time": 1,
        "series: value not a number": 2,
        "series: no node (no Hostname, hostname or instance label)": 1,
        "value: xid_last outside int32": 1,
    }


def test_the_answers_themselves_misshaped_raise_the_documented_error():
    with pytest.raises(PrometheusResultError, match="expected a list"):
        parse_results({"status": "success"})
    res = empty()
    res[fid("power_w")] = {"resultType": "vector"}
    with pytest.raises(PrometheusResultError, match=r"DCGM_FI_DEV_POWER_USAGE.*got dict"):
        parse_results(res)


def test_nodes_are_named_as_on_the_exporter_path():
    res = empty()
    res[fid("temp_c")] = [
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0",
                    "instance": "gpu001.cluster.example:9400"}, "value": [E0, "50"]},
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0",
                    "instance": "[fd00::9]:9400"}, "value": [E0, "50"]},
        {"metric": labels("DCGM_FI_DEV_GPU_TEMP", node="gpu002-ib.cluster.example"),
         "value": [E0, "50"]},
    ]
    names = NodeNames(strip_domain=True, regex=r"(gpu\d+)-ib", replace=r"\1")
    assert sorted(parse_results(res, names=names)["node"].to_pylist()) == [
        "fd00::9", "gpu001", "gpu002"]
    assert sorted(parse_results(res)["node"].to_pylist()) == [
        "fd00::9", "gpu001.cluster.example", "gpu002-ib.cluster.example"]


def test_mig_instances_fold_into_their_gpu_as_on_the_exporter_path():
    def inst(name, i, profile, value):
        return {"metric": labels(name, GPU_I_ID=str(i), GPU_I_PROFILE=profile,
                                 modelName="NVIDIA A100-SXM4-80GB"), "value": [E0, value]}
    res = empty()
    res[fid("mem_used_mib")] = [inst("DCGM_FI_DEV_FB_USED", 1, "3g.40gb", "1000"),
                                inst("DCGM_FI_DEV_FB_USED", 2, "4g.40gb", "500")]
    res[fid("gr_active_pct")] = [inst("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1, "3g.40gb", "0.7"),
                                 inst("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 2, "4g.40gb", "0")]
    (row,) = parse_results(res).to_pylist()
    assert row["mem_used_mib"] == 1500
    assert row["util_pct"] == pytest.approx(100 * 3 * 0.7 / 7)
    _, instances = read_results(res)
    assert [(x["gpu_i_id"], x["gpu_i_profile"], x["mem_used_mib"], x["ts"])
            for x in instances.to_pylist()] == [(1, "3g.40gb", 1000, T0), (2, "4g.40gb", 500, T0)]
    assert instances["gr_active_pct"].to_pylist() == [pytest.approx(70), 0]
    assert any("GR_ENGINE_ACTIVE" in q for q in field_queries())


# --------------------------------------------------------------- property-based tests

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                               max_size=3),
    max_leaves=12)
_label = st.one_of(st.sampled_from(["0", "1", "7", "31", "32", "70000", "-1", "", "x"]), _json)


@st.composite
def series(draw):
    """A series shaped like Prometheus's, with any part possibly replaced by junk."""
    metric = {"__name__": draw(st.sampled_from(["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_FB_USED",
                                                "x"]))}
    for key in ("gpu", "Hostname", "instance", "UUID", "GPU_I_ID", "GPU_I_PROFILE",
                "modelName"):
        if draw(st.booleans()):
            metric[key] = draw(_label)
    point = st.one_of(
        st.tuples(st.one_of(st.just(E0), st.floats(), st.integers(), _json),
                  st.one_of(st.sampled_from(["1", "NaN", "+Inf", "1e400", "4294967295"]),
                            st.floats().map(repr), _json)).map(list),
        _json)
    out = {"metric": draw(st.one_of(st.just(metric), _json))}
    if draw(st.booleans()):
        out["values"] = draw(st.one_of(st.lists(point, max_size=3), _json))
    else:
        out["value"] = draw(point)
    return draw(st.one_of(st.just(out), _json))



def test_points_whose_times_are_lists_cost_those_points():
    """Found by the property test: ``[[], "1"]`` (and ``[[1], "1"]`` everywhere) made
    numpy read the times as a 2-D array, and the reader crashed."""
    for bad_time in ([], [E0]):
        counts = Counter()
        results = empty()
        results[fid("temp_c")] = [
            {"metric": labels("DCGM_FI_DEV_GPU_TEMP", gpu="0"), "value": [bad_time, "1"]}]
        assert parse_results(results, counts=counts).num_rows == 0
        assert counts == {"series: time not a Unix time": 1}
        results[fid("temp_c")].append(
            {"metric": labels("DCGM_FI_DEV_GPU_TEMP", gpu="1"), "value": [E0, "41"]})
        table = parse_results(results, counts=counts)
        assert table["gpu_index"].to_pylist() == [1] and table["temp_c"].to_pylist() == [41]


@pytest.mark.property
@given(st.one_of(
    st.lists(st.lists(series(), max_size=4), max_size=len(FIELDS)),
    st.lists(st.one_of(st.lists(series(), max_size=2), _json), max_size=len(FIELDS)),
    _json))
def test_property_any_answer_gives_rows_or_the_documented_error(results):
    counts = Counter()
    try:
        table = parse_results(results, counts=counts)
    except PrometheusResultError as exc:
        assert "expected a list" in str(exc)  # names what is wrong (and which result)
        return
    assert table.schema.equals(SCHEMAS["samples"])
    assert all(0 <= g < 32 for g in table["gpu_index"].to_pylist())
    assert all(isinstance(k, str) and v > 0 for k, v in counts.items())


def test_points_far_from_now_are_refused_and_counted_by_the_source():
    class Client:
        def custom_query(self, query, params=None):
            if "GPU_TEMP" not in query:
                return []
            return [{"metric": labels("DCGM_FI_DEV_GPU_TEMP", gpu=str(g)), "value": [t, "50"]}
                    for g, t in ((0, E0), (1, E0 + 86400 * 365), (2, 1e10), (3, 1e12))]

    src = PrometheusSource(Client(), now=lambda: T0, pull="query")
    b = dict(src.collect(T0))
    assert b["samples"]["gpu_index"].to_pylist() == [0]
    assert src.dropped.as_dict() == {"row: timestamp not near now": 2,
                                     "series: time not a Unix time": 1}


# The reader checks a well-formed field's answer in bulk and falls back to checking
# series by series; both must give the same rows and the same counts.
_gpu_label = st.sampled_from(["0", "3", "7", "31", "32", "x"])
_host = st.sampled_from(["gpu001", "gpu002.cluster.example", ""])


@st.composite
def tidy_series(draw):
    """A series as Prometheus writes it, now and then with one label out of line."""
    metric = {"__name__": draw(st.sampled_from(["DCGM_FI_DEV_GPU_TEMP", "x"]))}
    for key, value in (("gpu", _gpu_label), ("Hostname", _host), ("hostname", _host),
                       ("instance", st.sampled_from(["gpu003:9400", "[::1]:9400", ""])),
                       ("UUID", st.just("GPU-1")), ("GPU_I_ID", st.sampled_from(["3", "x"])),
                       ("GPU_I_PROFILE", st.just("3g.40gb")), ("modelName", st.just("A100"))):
        if draw(st.booleans()):
            metric[key] = draw(value)
    point = st.tuples(st.sampled_from([E0, E0 + 15, -1]),
                      st.sampled_from(["1", "55.5", "NaN", "x", "1e400"])).map(list)
    if draw(st.booleans()):
        return {"metric": metric, "values": draw(st.lists(point, max_size=3))}
    return {"metric": metric, "value": draw(point)}


def _read_both_ways(results, **kw):
    from unittest import mock

    fast = Counter(), Counter()
    got = read_results(results, counts=fast[0], **kw), fast[0]
    with mock.patch("collector.promjson._read_well_formed", lambda *a: False):
        slow = read_results(results, counts=fast[1], **kw), fast[1]
    return got, slow


@pytest.mark.property
@given(st.lists(st.lists(tidy_series(), max_size=4), max_size=3),
       st.sampled_from(["", "node", "Hostname"]), st.booleans())
def test_property_bulk_checks_read_as_series_by_series_checks(results, node_label, strip):
    names = NodeNames(strip_domain=strip)
    (fast, fast_counts), (slow, slow_counts) = _read_both_ways(
        results, node_label=node_label, names=names)
    assert fast[0].equals(slow[0]) and fast[1].equals(slow[1])
    assert fast_counts == slow_counts


def test_a_well_formed_answer_takes_the_bulk_path():
    from collector import promjson as prometheus

    clean = [{"metric": labels("DCGM_FI_DEV_GPU_TEMP", gpu=str(g)), "value": [E0, "40"]}
             for g in range(8)] + [{"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP"},
                                    "value": [E0, "1"]}]  # no gpu label: not a GPU's
    cols = prometheus._Columns()
    args = ({"DCGM_FI_DEV_GPU_TEMP": 0}, "", prometheus._NodeOf(NodeNames()), cols)
    assert prometheus._read_well_formed(0, clean, *args)
    assert len(cols) == 8 and cols.values == ["40"] * 8
    bad = clean + [{"metric": labels("DCGM_FI_DEV_GPU_TEMP", gpu="70000"), "value": [E0, "1"]}]
    cols2 = prometheus._Columns()
    assert not prometheus._read_well_formed(0, bad, *args[:3], cols2)
    assert not len(cols2) and not any(cols2.series) and not cols2.values  # read anew
