-- gpulens warehouse, migration 9: node power measured by the BMC (issue 21).
-- collector/bmc_source.py writes the node's whole input power (IPMI DCMI or Redfish) and,
-- where the BMC keeps one, its cumulative energy counter; other_power_w (non-GPU power
-- known directly) stays for sources that have it. warehouse/queries/energy.py derives a
-- node-hour's non-GPU energy from the total minus the GPUs' energy.
ALTER TABLE node_power ADD COLUMN total_power_w DOUBLE;  -- W, the whole node at the wall
ALTER TABLE node_power ADD COLUMN energy_j DOUBLE;       -- J, the BMC's cumulative counter
ALTER TABLE node_power ADD COLUMN source VARCHAR;        -- 'ipmi' or 'redfish'
