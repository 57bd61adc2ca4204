-- gpulens warehouse, migration 7: failed runs costed again with the one cost model
-- (issues 14 and 19, warehouse/goodput.py): lost work since the last checkpoint whether
-- or not the job ran again, restart overhead without the queue wait, runs that ended
-- before the observed history dropped. The next analytics refresh classifies and costs
-- every failed run again (the refresh classifies the runs the table lacks).
DELETE FROM failures;
