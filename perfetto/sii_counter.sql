-- SII (scheduler interference index) and other aaco counters over time.
-- 'aaco.scheduler_interference <model>' comes from ANALYTICS_RESULT,
-- 'aaco.scheduler_interference.sched' from
-- SCHED_SAMPLE; both are parented to the process track.
-- Tables: counter (ts, track_id, value), counter_track (id, name).
SELECT
  ct.name AS counter,
  c.ts,
  c.value,
  MAX(c.value) OVER (PARTITION BY ct.id) AS max_value,
  AVG(c.value) OVER (PARTITION BY ct.id) AS mean_value
FROM counter c
JOIN counter_track ct ON ct.id = c.track_id
WHERE ct.name LIKE 'aaco.scheduler_interference%'
ORDER BY ct.name, c.ts;
