"""The parsers of outside input in the security layer and the API (issue #13): each
accepts what it documents and refuses everything else only with its documented error,
naming the field; none raises anything else, whatever the input."""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given
from hypothesis import strategies as st

from alerts.api import BadInput, _seconds, _text
from dashboard import auth, web_security
from dashboard.report.api import check_week

CONFIG = auth.AuthConfig(public_url="https://gpulens.example.com/",
                         allowed_hosts=frozenset({"gpulens.internal"}))
JSONISH = st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(),
                       lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)


@given(st.text(max_size=80))
def test_host_and_origin_checks_never_raise(text):
    assert web_security.host_allowed(CONFIG, text) in (True, False)
    assert web_security.origin_allowed(CONFIG, text, "http", "127.0.0.1:8050") in (True, False)
    origin = web_security.origin_of(text)
    assert origin is None or origin.startswith(("http://", "https://"))


@pytest.mark.parametrize("host, allowed", [
    ("127.0.0.1:8050", True), ("[::1]:8050", True), ("10.1.2.3", True),
    ("localhost:8050", True), ("gpulens.example.com", True), ("GPULENS.internal:80", True),
    ("attacker.example", False), ("127.0.0.1.nip.io:8050", False), ("", False),
    ("evil.example@127.0.0.1", False), ("localhost.evil.example", False),
])
def test_hosts(host, allowed):
    assert web_security.host_allowed(CONFIG, host) is allowed


@pytest.mark.parametrize("origin, allowed", [
    ("http://127.0.0.1:8050", True), ("https://gpulens.example.com", True),
    ("https://gpulens.example.com:443", True), ("http://127.0.0.1:8051", False),
    ("https://127.0.0.1:8050", False), ("http://gpulens.example.com", False),
    ("null", False), (None, False), ("https://gpulens.example.com.evil.example", False),
])
def test_origins(origin, allowed):
    assert web_security.origin_allowed(CONFIG, origin, "http", "127.0.0.1:8050") is allowed


@given(JSONISH)
def test_seconds_refuses_only_with_bad_input_naming_the_field(value):
    try:
        seconds = _seconds(value, "duration", low=1, high=86400)
    except BadInput as exc:
        assert str(exc).startswith("duration: ")
    else:
        assert 1 <= seconds <= 86400


@given(JSONISH)
def test_text_fields_refuse_only_with_bad_input_naming_the_field(value):
    try:
        text = _text({"comment": value}, "comment", limit=100)
    except BadInput as exc:
        assert str(exc).startswith("comment: ")
    else:
        assert isinstance(text, str) and len(text) <= 100


@given(JSONISH | st.from_regex(r"\A\d{1,5}-W\d{1,3}\Z"))
def test_week_refuses_only_with_value_error_naming_the_field(value):
    try:
        week = check_week(value, date(2026, 11, 22))
    except ValueError as exc:
        assert str(exc).startswith("week: ")
    else:
        assert week <= "2026-W47" and week >= "1970"


@given(st.text(max_size=60))
def test_networks_and_names_refuse_only_with_value_error(text):
    for parser in (auth.parse_networks, auth.parse_names, auth.parse_limits):
        try:
            parser(text)
        except ValueError:
            pass


def test_report_files_are_served_in_a_csp_sandbox(tmp_path):
    from flask import Flask

    from dashboard.report.api import create_blueprint

    (tmp_path / "gpulens-report-2026-W47.html").write_text("<script>alert(1)</script>")
    app = Flask("t")
    app.register_blueprint(create_blueprint(lambda week, send: {}, str(tmp_path)))
    resp = app.test_client().get("/api/reports/files/gpulens-report-2026-W47.html")
    assert resp.status_code == 200
    assert resp.headers["Content-Security-Policy"].startswith("sandbox allow-scripts;")
    assert app.test_client().get("/api/reports/files/..%2Fsecret").status_code == 404
