-- gpulens warehouse, migration 3: thermal alerts, their notification outbox, silences.
-- Every TIMESTAMP is naive UTC. See alerts/ and docs/alerts.md.

-- One row per alert episode (a rule and an entity, from pending to resolved). Pending
-- alerts that go back to inactive are deleted; resolved ones are kept.
CREATE TABLE alerts (
    alert_id VARCHAR PRIMARY KEY,
    fingerprint VARCHAR NOT NULL,      -- rule:entity, e.g. rack_cooling:r03
    rule VARCHAR NOT NULL,
    severity VARCHAR NOT NULL,         -- info | warning | critical
    scope VARCHAR NOT NULL,            -- gpu | node | rack
    rack VARCHAR,
    node VARCHAR,
    gpu_index SMALLINT,
    group_key VARCHAR NOT NULL,        -- rule/rack: one notification per group
    state VARCHAR NOT NULL,            -- pending | firing | resolved
    value DOUBLE,                      -- newest value, in the rule's unit
    peak DOUBLE,                       -- highest value of the episode
    threshold DOUBLE,
    unit VARCHAR,
    active_since TIMESTAMP NOT NULL,
    fired_at TIMESTAMP,
    resolved_at TIMESTAMP,
    clear_since TIMESTAMP,
    last_eval TIMESTAMP,
    context VARCHAR,                   -- JSON: temperatures, power, nodes, codes
    acked_at TIMESTAMP,
    acked_by VARCHAR,
    ack_comment VARCHAR
);

-- Open notification groups: a row exists while a group's firing message is out and
-- its resolved message is not.
CREATE TABLE alert_groups (
    group_key VARCHAR PRIMARY KEY,
    opened_at TIMESTAMP NOT NULL
);

-- The outbox: one row per notification and sink, delivered in the background with
-- exponential backoff. notification_key is the idempotency key sent to receivers.
CREATE TABLE notifications (
    notification_key VARCHAR NOT NULL,
    sink VARCHAR NOT NULL,             -- webhook | slack | alertmanager
    kind VARCHAR NOT NULL,             -- firing | resolved | test
    group_key VARCHAR,
    created_at TIMESTAMP NOT NULL,
    body VARCHAR NOT NULL,             -- the exact bytes sent (UTF-8 JSON)
    status VARCHAR NOT NULL,           -- pending | delivered | dead
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMP NOT NULL,
    delivered_at TIMESTAMP,
    last_error VARCHAR,
    PRIMARY KEY (notification_key, sink)
);

CREATE TABLE silences (
    silence_id VARCHAR PRIMARY KEY,
    rule VARCHAR,                      -- NULL matches any rule
    rack VARCHAR,
    node VARCHAR,
    created_at TIMESTAMP NOT NULL,
    expires_at TIMESTAMP NOT NULL,
    created_by VARCHAR,
    comment VARCHAR
);
