"""Thermal alerting: rules, a pure evaluator, persisted state, and delivery to sinks.

- ``rules``: the default rules and building them from settings;
- ``window`` / ``detectors``: the windowed data and what each rule finds in it;
- ``engine.evaluate(rules, data, now, state, silences)``: the pure state machine
  (inactive -> pending -> firing -> resolved) and notification grouping;
- ``runtime.AlertRuntime``: what the service schedules (evaluate, persist, deliver);
- ``payloads`` / ``sinks`` / ``delivery``: webhook, Slack and Alertmanager bodies, the
  signed HTTP POST, and the outbox with backoff;
- ``ha``: an HA pair of instances (the twin's liveness, twin_gone, who sends direct sinks);
- ``api`` (Flask blueprint), ``ops`` (operator actions), ``receiver`` (a webhook receiver).

See docs/alerts.md.
"""
