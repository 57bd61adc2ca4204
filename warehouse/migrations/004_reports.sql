-- gpulens warehouse, migration 4: the archive of weekly reports (see docs/reports.md).

CREATE TABLE reports (
    week VARCHAR NOT NULL,            -- ISO week, e.g. 2026-W47
    format VARCHAR NOT NULL,          -- html | pdf
    week_start TIMESTAMP NOT NULL,    -- naive UTC
    week_end TIMESTAMP NOT NULL,      -- naive UTC; earlier than a week while in progress
    generated_at TIMESTAMP NOT NULL,
    title VARCHAR,
    path VARCHAR NOT NULL,
    size_bytes BIGINT,
    headline VARCHAR,                 -- JSON: the report's headline numbers
    PRIMARY KEY (week, format)
);
