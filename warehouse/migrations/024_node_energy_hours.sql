-- gpulens warehouse, migration 24 (issue 17): the Energy page's node energy per hour
-- (warehouse/queries/energy.py:energy_by) grouped a day of gpu_energy_1h per node-hour
-- (0.59 M rows at 24,576 GPUs) and a day of node_power readings per node-hour (1.3-4.4 M)
-- on every call: ~0.19 s of CPU a day of range. The analytics refresh now keeps the same
-- per node-hour values (warehouse/node_energy.py), with what each hour was computed from;
-- a query reads an hour kept only while its inputs are as they were. Derived: empty after
-- this migration, filled by the refresh (newest hours first); until then computed live.
-- Every TIMESTAMP is naive UTC.
CREATE TABLE node_energy_1h (
    ts TIMESTAMP NOT NULL,   -- hour start
    node VARCHAR NOT NULL,
    gpu_j DOUBLE,            -- J, the sum of the node's gpu_energy_1h rows of the hour
    w DOUBLE,                -- W, mean other_power_w of the node's readings in the hour
    bmc_w DOUBLE,            -- W, mean total_power_w of those readings
    counter_j DOUBLE         -- J, the BMC energy counter's joules scaled to the hour
                             -- (NULL: no usable counter steps, or too coarse)
);
CREATE TABLE node_energy_hours (
    ts TIMESTAMP PRIMARY KEY,  -- an hour computed into node_energy_1h
    gpu_rows BIGINT,           -- gpu_energy_1h rows of the hour
    gpu_sig HUGEINT,           -- sum of hash(ts, node, gpu_index, energy_j) of those rows
    power_rows BIGINT,         -- node_power rows in [ts - 1 h, ts + 1 h)
    power_us HUGEINT,          -- sum of their epoch microseconds
    power_sig HUGEINT,         -- sum of hash(ts, node, other_power_w, total_power_w,
                               -- energy_j) of those rows
    computed_at TIMESTAMP
);
