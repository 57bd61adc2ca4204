"""The grid-intensity providers' parsers (issue 21) on their documentation's example answers
(tests/fixtures/grid/README.md), on bad answers, and property-based: each fails only with
GridParseError, naming the input; a bad reading costs that reading."""

import math
import re
from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.grid import MAX_G_PER_KWH, GridParseError, Parsed, ukgrid, watttime
from collector.grid import electricitymaps as em
from tests.support.grid import fixture

LB_PER_MWH = 0.45359237  # g/kWh


def test_electricity_maps_documented_answers():
    latest = em.parse_latest(fixture("electricitymaps_latest.json"))
    assert latest.readings == [em.Reading(datetime(2018, 4, 25, 18, 7, 0, 350000), 302.0)]
    hist = em.parse_history(fixture("electricitymaps_history.json"))
    assert [(r.ts, r.g_co2_per_kwh) for r in hist.readings] == [
        (datetime(2021, 8, 18, 13), 413.0), (datetime(2021, 8, 19, 12), 338.0)]
    assert hist.rejected == []


def test_watttime_documented_answers():
    assert watttime.parse_login(fixture("watttime_login.json")) == "<TOKEN>"
    data = watttime.parse_data(fixture("watttime_historical.json"))
    assert [(r.ts, r.g_co2_per_kwh) for r in data.readings] == [
        (datetime(2022, 7, 15, 0, 0), pytest.approx(870 * LB_PER_MWH)),
        (datetime(2022, 7, 15, 0, 5), pytest.approx(860 * LB_PER_MWH))]
    # the signal index is a percentile, not an intensity: refused as a whole
    with pytest.raises(GridParseError, match="units 'percentile' are no emissions rate"):
        watttime.parse_data(fixture("watttime_signal_index.json"))


def test_uk_documented_answer_prefers_the_actual():
    data = ukgrid.parse_intensity(fixture("ukgrid_intensity.json"))
    assert [(r.ts, r.g_co2_per_kwh) for r in data.readings] == [
        (datetime(2018, 1, 20, 12, 0), 263.0)]
    doc = fixture("ukgrid_intensity.json")
    doc["data"][0]["intensity"]["actual"] = None  # not settled yet: the forecast stands
    assert ukgrid.parse_intensity(doc).readings[0].g_co2_per_kwh == 266.0


def test_a_bad_point_costs_that_point():
    doc = fixture("electricitymaps_history.json")
    doc["history"] += [{"datetime": "2021-08-19T13:00:00.000Z", "carbonIntensity": None},
                       {"datetime": "2021-08-19T14:00:00", "carbonIntensity": 300},
                       {"datetime": "2021-08-19T15:00:00Z", "carbonIntensity": -5},
                       {"datetime": "2021-08-19T16:00:00Z", "carbonIntensity": "300"},
                       {"datetime": "2021-08-19T17:00:00Z", "carbonIntensity": 1e9}]
    out = em.parse_history(doc)
    assert len(out.readings) == 2
    assert [m.split(":")[0] for m in out.rejected] == [
        f"carbon-intensity/history.history[{i}]" for i in range(2, 7)]
    assert "null" in out.rejected[0] and "no time zone" in out.rejected[1]
    doc = fixture("watttime_historical.json")
    doc["data"].append({"point_time": "2022-07-15T00:10:00+00:00", "value": float("nan")})
    assert len(watttime.parse_data(doc).readings) == 2


@pytest.mark.parametrize("parse, doc, message", [
    (em.parse_history, [], "carbon-intensity/history: '[]' is not a JSON object"),
    (em.parse_history, {"zone": "DE"}, "no 'history'"),
    (em.parse_history, {"history": {"a": 1}}, "is not a list"),
    (em.parse_latest, {"carbonIntensity": 300}, "no 'datetime'"),
    (watttime.parse_data, {"data": []}, "no 'meta'"),
    (watttime.parse_data, {"data": [], "meta": {"units": 7}}, "units '7' are no emissions"),
    (watttime.parse_login, {"token": ""}, "token is not a non-empty string"),
    (ukgrid.parse_intensity, {"error": {"code": "400 Bad Request"}}, "no 'data'"),
])
def test_bad_answers_are_refused_naming_them(parse, doc, message):
    with pytest.raises(GridParseError, match=re.escape(message)):
        parse(doc)


def test_a_refused_token_is_never_quoted():
    with pytest.raises(GridParseError) as exc:
        watttime.parse_login({"token": ["secret-value"]})
    assert "secret" not in str(exc.value)


# ------------------------------------------------------------------ property-based

json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_any = st.recursive(json_leaf, lambda c: st.lists(c, max_size=4)
                        | st.dictionaries(st.text(max_size=10), c, max_size=4), max_leaves=12)
times = (st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat())
         | st.sampled_from(["2018-01-20T12:00Z", "2021-08-18T13:00:00.000Z", "", "yesterday",
                            "2021-08-18T13:00:00", "9999-12-31T23:59:59-23:59"])
         | json_leaf)
values = st.integers(-10, 5000) | st.floats(allow_nan=True, allow_infinity=True) | json_leaf


def em_doc():
    point = st.fixed_dictionaries({"datetime": times, "carbonIntensity": values})
    return st.one_of(json_any, st.fixed_dictionaries({"history": st.lists(point, max_size=5)}),
                     st.fixed_dictionaries({"data": st.lists(point | json_any, max_size=5)}))


def wt_doc():
    point = st.fixed_dictionaries({"point_time": times, "value": values})
    units = st.sampled_from([*watttime.UNITS, "percentile"]) | json_leaf
    return st.one_of(json_any, st.fixed_dictionaries({
        "data": st.lists(point | json_any, max_size=5),
        "meta": st.fixed_dictionaries({"units": units}) | json_any}))


def uk_doc():
    inner = st.fixed_dictionaries({"forecast": values, "actual": values}) | json_any
    point = st.fixed_dictionaries({"from": times, "intensity": inner})
    return st.one_of(json_any, st.fixed_dictionaries({"data": st.lists(point | json_any,
                                                                      max_size=5)}))


def check(parse, doc, names: tuple[str, ...]):
    """``parse(doc)`` gives plausible readings, or GridParseError naming the endpoint."""
    try:
        out = parse(doc)
    except GridParseError as exc:
        assert str(exc).startswith(names), str(exc)
        return
    assert isinstance(out, Parsed)
    for r in out.readings:
        assert r.ts.tzinfo is None and 2000 <= r.ts.year < 2100
        assert math.isfinite(r.g_co2_per_kwh) and 0 <= r.g_co2_per_kwh <= MAX_G_PER_KWH
    for message in out.rejected:
        assert message.startswith(names) and "[" in message.split(":")[0], message


@given(em_doc())
def test_electricity_maps_parser_property(doc):
    check(em.parse_history, doc, ("carbon-intensity/history",))
    check(em.parse_latest, doc, ("carbon-intensity/latest",))


@given(wt_doc())
def test_watttime_parser_property(doc):
    check(watttime.parse_data, doc, ("watttime",))
    try:
        token = watttime.parse_login(doc)
    except GridParseError as exc:
        assert str(exc).startswith("login")
    else:
        assert isinstance(token, str) and token


@given(uk_doc())
def test_uk_parser_property(doc):
    check(ukgrid.parse_intensity, doc, ("intensity",))
