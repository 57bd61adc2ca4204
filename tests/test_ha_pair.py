"""An HA pair (issue 20) without processes: the pair's shared identity of alerts and
notifications, who sends (the gate), twin_gone, and the twin's /healthz parser."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from types import SimpleNamespace

import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st

from alerts.delivery import deliver_due
from alerts.ha import COVERED, HOLD, SEND, Pair, TwinError, parse_twin
from alerts.model import FIRING, RESOLVED
from alerts.runtime import AlertRuntime
from alerts.sinks import Sink
from gpulens.config import load
from tests.support.alerts import STEP, T0, Cluster, alert_config
from warehouse import Warehouse
from warehouse import alerts_store as store
from warehouse.queries import alerts as q

PEER = "http://gpulens-b:8050/"


def pair_config(role: str = "standby", **ha):
    return load(None, env={}).with_overrides(
        cluster__name="rsc-1", ha__peer_url=PEER, ha__role=role,
        **{f"ha__{k}": v for k, v in ha.items()})


def healthz(*delivered: dict, name: str = "gpulens-b") -> bytes:
    return json.dumps({"status": "ok", "ha": {"name": name, "role": "primary",
                                              "cluster": "rsc-1",
                                              "delivered": list(delivered)}}).encode()


def row(kind="firing", group="rack_cooling/r2", sink="webhook", key="k1", at=T0):
    return SimpleNamespace(notification_key=key, sink=sink, kind=kind, group_key=group,
                           created_at=at)


class Clock:
    def __init__(self, now: datetime):
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.mark.slow
def test_a_pair_evaluating_at_different_moments_agrees_on_alert_ids_and_keys():
    """Two instances see the same samples but evaluate 2 s and 11 s after each tick:
    on the sources' clock they fire and resolve at the same time, with the same ids
    and idempotency keys (what Alertmanager and a key-honouring receiver rely on)."""
    cluster = Cluster()
    cluster.incidents.append(("r2", T0 + timedelta(minutes=4), T0 + timedelta(minutes=9),
                              12.0))
    whs = [Warehouse(":memory:"), Warehouse(":memory:")]
    walls = [Clock(T0), Clock(T0)]
    rts = [AlertRuntime(wh, alert_config("rsc-1"), now=wall)
           for wh, wall in zip(whs, walls, strict=True)]
    notes: list[list] = [[], []]
    try:
        for wh in whs:
            wh.ingest_all(cluster.topology())
        now = T0
        while now < T0 + timedelta(minutes=17):
            frame = cluster.samples(now)
            for i, lag_s in enumerate((2, 11)):
                whs[i].ingest("samples", frame).result()
                walls[i].now = now + timedelta(seconds=lag_s)
                result = rts[i].evaluate_once()
                notes[i] += result.notifications if result else []
            now += STEP
        assert [(n.kind, n.group) for n in notes[0]] == [("firing", "rack_cooling/r2"),
                                                          ("resolved", "rack_cooling/r2")]
        assert [(n.key, n.created_at) for n in notes[0]] == [
            (n.key, n.created_at) for n in notes[1]]
        assert notes[0][0].created_at.second % 15 == 0  # a tick, not a wall-clock moment
        alerts = [q.list_alerts(wh.reader(), now=now, since_s=86400)[
            ["alert_id", "state", "fired_at", "resolved_at"]] for wh in whs]
        assert alerts[0].equals(alerts[1]) and set(alerts[0]["state"]) == {RESOLVED}
    finally:
        for wh in whs:
            wh.close()


def test_the_key_names_the_cluster():
    """Two clusters paging one receiver with the same rack names keep apart."""
    from alerts.model import episode_key

    assert episode_key("rsc-1", "rack_cooling/r2", T0, "firing") != episode_key(
        "rsc-2", "rack_cooling/r2", T0, "firing")
    # a twin that fired one tick later in the same minute agrees
    assert episode_key("rsc-1", "g", T0, "firing") == episode_key(
        "rsc-1", "g", T0 + STEP, "firing")


def test_standby_holds_direct_sinks_until_the_twin_delivers_or_is_gone():
    clock = Clock(T0)
    answer = {"body": healthz({"key": "other-key", "sink": "webhook", "kind": "firing",
                               "group": "rack_cooling/r2", "created_at": "2026-11-02T12:00:15Z"})}

    def fetch(url, timeout_s):
        assert url == PEER + "healthz"
        if answer["body"] is None:
            raise requests.ConnectionError("refused")
        return answer["body"]

    pair = Pair(pair_config(twin_gone_after_s=60), name="a", now=clock, fetch=fetch)
    assert pair.gate(row(), T0) == HOLD  # not seen yet, not gone yet: the primary's job
    assert pair.gate(row(sink="alertmanager"), T0) == SEND  # it deduplicates itself
    assert pair.poll_once() and pair.view.name == "gpulens-b"
    assert pair.gate(row(), T0) == COVERED  # 15 s apart, another key: the same page
    assert pair.gate(row(at=T0 + timedelta(hours=1)), T0) == HOLD  # another episode
    assert pair.gate(row(kind="resolved"), T0) == HOLD
    assert pair.gate(row(sink="slack"), T0) == HOLD  # delivered to the webhook only
    answer["body"] = None
    clock.now = T0 + timedelta(seconds=59)
    assert not pair.poll_once() and pair.last_error == "ConnectionError"
    assert pair.gate(row(kind="resolved"), clock.now) == HOLD
    clock.now = T0 + timedelta(seconds=61)  # unseen for 61 s: the standby pages
    assert pair.gate(row(kind="resolved"), clock.now) == SEND
    assert pair.gate(row(), clock.now) == COVERED  # what the twin delivered stays delivered
    assert pair.twins(clock.now) == {"gpulens-b:8050": 61.0}


def test_primary_sends_unless_the_twin_already_did_and_a_weeks_report_once():
    clock = Clock(T0)
    report = {"key": "r-b", "sink": "email", "kind": "report", "group": "report/2026-W45",
              "created_at": "2026-11-09T07:00:00Z"}
    pair = Pair(pair_config("primary"), name="a", now=clock,
                fetch=lambda url, t: healthz(report))
    assert pair.gate(row(), T0) == SEND
    assert pair.poll_once()
    # the standby made the same week's report hours later (it caught up after a restart)
    assert pair.gate(row("report", "report/2026-W45", "email", "r-a",
                         datetime(2026, 11, 9, 11)), T0) == COVERED
    assert pair.gate(row("report", "report/2026-W46", "email", "r-a"), T0) == SEND


def test_without_a_peer_nothing_is_gated_and_no_twin_rule():
    pair = Pair(load(None, env={}), name="a")
    assert not pair.enabled and pair.rules() == () and pair.twins(T0) == {}
    assert pair.gate(row(), T0) == SEND


def test_deliver_due_keeps_order_behind_a_held_row_and_marks_covered_ones():
    wh = Warehouse(":memory:")
    sent = []
    try:
        rows = [{"notification_key": key, "sink": "webhook", "kind": kind,
                 "group_key": "rack_cooling/r2", "created_at": T0 + timedelta(seconds=i),
                 "body": "{}", "status": "pending", "attempts": 0, "next_attempt_at": T0}
                for i, (key, kind) in enumerate([("k1", "firing"), ("k2", "resolved"),
                                                 ("k3", "firing")])]
        wh.write(lambda con: store.enqueue(con, rows)).result()
        verdicts = {"k1": COVERED, "k2": HOLD, "k3": SEND}
        counts = deliver_due(wh, {"webhook": Sink("webhook", "http://x/")}, now=T0,
                             send=lambda *a, **k: sent.append(a[2]) or 200,
                             gate=lambda r, now: verdicts[r.notification_key])
        assert counts == {"delivered": 0, "failed": 0, "covered": 1, "held": 1, "expired": 0}
        assert sent == []  # k3 waits behind the held k2: a sink's order is kept
        status = q.list_notifications(wh.reader(), now=T0 + STEP).set_index(
            "notification_key")["status"].to_dict()
        assert status == {"k1": "twin", "k2": "pending", "k3": "pending"}
        verdicts["k2"] = SEND
        deliver_due(wh, {"webhook": Sink("webhook", "http://x/")}, now=T0,
                    send=lambda *a, **k: sent.append(a[2]) or 200,
                    gate=lambda r, now: verdicts[r.notification_key])
        assert sent == ["k2", "k3"]
    finally:
        wh.close()


def test_twin_gone_fires_when_the_twin_is_unseen_and_resolves_when_it_answers():
    cluster = Cluster()
    wall = Clock(T0)
    up = {"yes": False}

    def fetch(url, timeout_s):
        if not up["yes"]:
            raise requests.ConnectTimeout("no route")
        return healthz()

    pair = Pair(pair_config("primary", twin_gone_after_s=60), name="a", now=wall,
                fetch=fetch)
    wh = Warehouse(":memory:")
    try:
        wh.ingest_all(cluster.topology())
        rt = AlertRuntime(wh, alert_config("rsc-1"), now=wall, pair=pair)
        seen = []
        for i in range(12):
            wall.now = T0 + i * STEP
            up["yes"] = i >= 9
            pair.poll_once()
            wh.ingest("samples", cluster.samples(wall.now)).result()
            result = rt.evaluate_once()
            seen += [(i, a.rule, a.node, a.state) for a in result.upserts
                     if not seen or seen[-1][3] != a.state]  # the state's changes
        assert seen == [(4, "twin_gone", "gpulens-b:8050", FIRING),
                        (9, "twin_gone", "gpulens-b:8050", RESOLVED)]
    finally:
        wh.close()


# -- the twin's /healthz is outside input --------------------------------------------

def test_a_bad_delivered_entry_costs_that_entry():
    good = {"key": "k", "sink": "webhook", "kind": "firing", "group": "g",
            "created_at": "2026-11-02T12:00:00Z"}
    view = parse_twin(healthz(good, {**good, "created_at": "yesterday"}, 7,
                              {**good, "sink": ""}, {**good, "created_at": "2026-11-02T12:00:00+02:00"}))
    assert [d.key for d in view.delivered] == ["k"] and view.dropped == 4


@pytest.mark.parametrize("raw, says", [
    (b"<html>502 Bad Gateway</html>", "not JSON"),
    (b'{"status": "ok"}', "no ha section"),
    (b'{"ha": {"name": ""}}', "ha.name"),
    (b'{"ha": {"name": "b", "delivered": {}}}', "ha.delivered"),
    (b"[" * 100_000, "not JSON"),
])
def test_answers_that_are_not_a_twin_are_refused_naming_the_input(raw, says):
    with pytest.raises(TwinError, match=says):
        parse_twin(raw)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


@pytest.mark.property
@given(st.one_of(st.binary(max_size=200), JSON.map(lambda v: json.dumps(v).encode()),
                 JSON.map(lambda v: json.dumps({"ha": v}).encode()),
                 st.lists(st.dictionaries(st.sampled_from(
                     ["key", "sink", "kind", "group", "created_at"]), JSON), max_size=4).map(
                     lambda d: json.dumps({"ha": {"name": "b", "delivered": d}}).encode())))
def test_parse_twin_fails_only_with_its_error(raw):
    try:
        view = parse_twin(raw)
    except TwinError as exc:
        assert str(exc)
        return
    assert view.name and len(view.delivered) + view.dropped <= 1000


@pytest.mark.slow
def test_alertmanager_re_sends_stop_in_the_resolve_hold(tmp_path):
    """A firing post after the twin's resolve re-opens the alert in Alertmanager: an
    alert below its clear level (in its resolve hold) is no longer re-sent."""
    from tests.support.alerts import Incident

    inc = Incident(tmp_path / "w.duckdb", alertmanager_url="http://am.invalid:9093",
                   alertmanager_resend_s=5)
    posts = []
    inc.send = lambda sink, body, key, **kw: posts.append((inc.now, json.loads(body))) or 200
    try:
        inc.run_until(45)
        alerts = q.list_alerts(inc.wh.reader(), now=inc.now, since_s=86400)
        [rack] = alerts[alerts["rule"] == "rack_cooling"].to_dict("records")
        firing = [t for t, items in posts for i in items
                  if i["labels"]["alertname"] == "rack_cooling" and "endsAt" not in i]
        assert len(firing) > 3  # re-sent while the rack was hot
        assert max(firing) < rack["clear_since"] < rack["resolved_at"]
        assert [t for t, items in posts for i in items if "endsAt" in i] == [
            rack["resolved_at"]]
    finally:
        inc.wh.close()


def test_a_twin_watching_another_cluster_is_reported(caplog):
    """Different cluster.name values give different keys and labels: the pair would page
    twice, so the first answer of such a twin is logged as a warning."""
    other = json.dumps({"ha": {"name": "b", "cluster": "rsc-2", "delivered": []}}).encode()
    pair = Pair(pair_config("primary"), name="a", fetch=lambda url, t: other)
    with caplog.at_level("WARNING", logger="alerts.ha"):
        assert pair.poll_once() and pair.poll_once()
    [record] = caplog.records
    assert "'rsc-2'" in record.getMessage() and "'rsc-1'" in record.getMessage()


@pytest.mark.slow
def test_firing_alerts_are_re_sent_to_alertmanager_while_telemetry_is_missing(tmp_path):
    """Firing alerts carry no endsAt: without re-sends in a telemetry outage Alertmanager
    would resolve them after its resolve_timeout. Missing samples are not a recovery."""
    from alerts.receiver import start_receiver
    from tests.support.alerts import Incident

    rx = start_receiver()
    inc = Incident(tmp_path / "w.duckdb", alertmanager_url=f"{rx.url}api/v2/alerts",
                   alertmanager_resend_s=60)
    try:
        inc.run_until(22)
        active = q.active_alerts(inc.wh.reader())
        assert "rack_cooling" in set(active["rule"])  # the rack is hot and firing
        inc.now += 5 * STEP  # the last sample is more than a minute old from here on
        before = len(rx.received)
        for _ in range(20):  # five minutes without a sample: every evaluation skips
            inc.now += STEP
            assert inc.rt.evaluate_once() is None
        firing = [i for r in rx.received[before:] for i in r.body
                  if i["labels"]["alertname"] == "rack_cooling" and "endsAt" not in i]
        assert len(firing) >= 4  # one re-send a minute, still firing
        assert [i for r in rx.received[before:] for i in r.body if "endsAt" in i] == []
        assert "rack_cooling" in set(q.active_alerts(inc.wh.reader())["rule"])
    finally:
        inc.wh.close()
        rx.stop()


def test_a_row_held_past_give_up_is_marked_dead_not_paged_days_later():
    """The standby holds rows while the primary lives; one held for the give-up time
    (the primary never delivered it) is dead, not sent at the primary's next absence."""
    from alerts.delivery import Backoff

    wh = Warehouse(":memory:")
    sent = []
    try:
        rows = [{"notification_key": key, "sink": "webhook", "kind": "firing",
                 "group_key": "rack_cooling/r2", "created_at": at, "body": "{}",
                 "status": "pending", "attempts": 0, "next_attempt_at": at}
                for key, at in [("old", T0), ("new", T0 + timedelta(hours=23))]]
        wh.write(lambda con: store.enqueue(con, rows)).result()
        verdict = {"v": HOLD}
        sinks, backoff = {"webhook": Sink("webhook", "http://x/")}, Backoff(give_up_s=86400)
        kw = {"backoff": backoff, "send": lambda *a, **k: sent.append(a[2]) or 200,
              "gate": lambda r, now: verdict["v"]}
        day = T0 + timedelta(hours=24)
        assert deliver_due(wh, sinks, now=day - STEP, **kw)["expired"] == 0
        counts = deliver_due(wh, sinks, now=day, **kw)
        assert counts["expired"] == 1 and counts["held"] == 1
        status = q.list_notifications(wh.reader(), now=day, since_s=2 * 86400).set_index(
            "notification_key")["status"].to_dict()
        assert status == {"old": "dead", "new": "pending"}
        verdict["v"] = SEND  # the primary is gone days later: only the recent row goes
        deliver_due(wh, sinks, now=day + timedelta(minutes=1), **kw)
        assert sent == ["new"]
    finally:
        wh.close()


def _outbox(wh, *rows):
    wh.write(lambda con: store.enqueue(con, [
        {"notification_key": key, "sink": "webhook", "kind": "firing",
         "group_key": "rack_cooling/r2", "created_at": at, "body": "{}",
         "status": "pending", "attempts": 0, "next_attempt_at": at} for key, at in rows])
    ).result()


def _statuses(wh, now):
    return q.list_notifications(wh.reader(), now=now, since_s=86400).set_index(
        "notification_key")["status"].to_dict()


def test_a_flapping_groups_second_episode_is_not_taken_for_the_twins_first():
    """The primary delivered episode 1 (key k1) and died; the group fired again 90 s
    later (k2). k1 is this standby's own key too, so it stands for k1 alone: k2 is held,
    and sent once the primary is gone (before, it was marked twin: the page was lost)."""
    wh = Warehouse(":memory:")
    clock, sent = Clock(T0 + timedelta(seconds=100)), []
    try:
        _outbox(wh, ("k1", T0), ("k2", T0 + timedelta(seconds=90)))
        ep1 = {"key": "k1", "sink": "webhook", "kind": "firing", "group": "rack_cooling/r2",
               "created_at": "2026-11-02T12:00:00Z"}
        pair = Pair(pair_config(), name="a", now=clock, fetch=lambda url, t: healthz(ep1),
                    reader=wh.reader)
        assert pair.poll_once()
        sinks = {"webhook": Sink("webhook", "http://x/")}
        kw = {"send": lambda *a, **k: sent.append(a[2]) or 200, "gate": pair.gate}
        counts = deliver_due(wh, sinks, now=clock.now, **kw)
        assert counts["covered"] == 1 and counts["held"] == 1
        assert _statuses(wh, clock.now) == {"k1": "twin", "k2": "pending"}
        clock.now += timedelta(seconds=61)  # the primary is gone: the standby pages k2
        deliver_due(wh, sinks, now=clock.now, **kw)
        assert sent == ["k2"]
    finally:
        wh.close()


def test_one_twin_delivery_under_another_key_stands_for_one_local_row():
    """The twin fired a tick later across a minute turn (key x): it stands for the
    nearest local row of the group; a second local row in reach is not covered too."""
    wh = Warehouse(":memory:")
    now = T0 + timedelta(seconds=100)
    try:
        _outbox(wh, ("a", T0), ("b", T0 + timedelta(seconds=60)))
        x = {"key": "x", "sink": "webhook", "kind": "firing", "group": "rack_cooling/r2",
             "created_at": "2026-11-02T12:00:15Z"}
        pair = Pair(pair_config(), name="a", now=lambda: now,
                    fetch=lambda url, t: healthz(x), reader=wh.reader)
        assert pair.poll_once()
        for _ in range(2):  # a second pass (the row a now 'twin') changes nothing
            deliver_due(wh, {"webhook": Sink("webhook", "http://x/")}, now=now,
                        send=lambda *a, **k: 200, gate=pair.gate)
        assert _statuses(wh, now) == {"a": "twin", "b": "pending"}
        far = {**x, "created_at": "2026-11-02T12:03:00Z"}  # beyond ha.match_s (120 s)
        late = Pair(pair_config(), name="a", now=lambda: now, fetch=lambda url, t: healthz(far))
        assert late.poll_once() and late.gate(row(key="c"), now) == HOLD
        assert late.gate(row(key="c", at=T0 + timedelta(seconds=61)), now) == COVERED
    finally:
        wh.close()


def test_the_gate_judges_the_twin_gone_at_the_time_it_is_given():
    """deliver_due passes its ``now``; the gate uses it, not the pair's own clock."""
    pair = Pair(pair_config(twin_gone_after_s=60), name="a", now=lambda: T0,
                fetch=lambda url, t: b"")
    assert pair.gate(row(), T0 + timedelta(seconds=59)) == HOLD
    assert pair.gate(row(), T0 + timedelta(seconds=61)) == SEND


def test_a_huge_healthz_answer_is_read_only_past_the_limit_and_refused():
    """A twin (or whatever answers at its address) sending 20 MiB: the poll reads just
    past MAX_ANSWER_BYTES and refuses the answer, naming its size."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from alerts.ha import MAX_ANSWER_BYTES, _fetch

    block = b"x" * (1024 * 1024)

    class Huge(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's naming)
            self.send_response(200)
            self.send_header("Content-Length", str(20 * len(block)))
            self.end_headers()
            try:
                for _ in range(20):
                    self.wfile.write(block)
            except OSError:  # the client stopped reading
                pass

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Huge)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        body = _fetch(url + "healthz", 5.0)
        assert MAX_ANSWER_BYTES < len(body) <= MAX_ANSWER_BYTES + 64 * 1024
        pair = Pair(load(None, env={}).with_overrides(ha__peer_url=url), name="a")
        assert not pair.poll_once()
        assert pair.last_error.startswith(f"answer of {len(body)} bytes")
    finally:
        server.shutdown()
        server.server_close()
