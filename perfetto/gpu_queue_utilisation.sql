-- GPU queue utilisation: busy time / wall span per (agent, queue) track.
-- Queue tracks are named 'queue <q>' with parent track 'GPU agent <a>'.
-- Tables: track (id, name, parent_id), slice.
SELECT
  a.name AS agent,
  q.name AS queue,
  COUNT(s.id) AS kernels,
  SUM(s.dur) AS busy_ns,
  MAX(s.ts + s.dur) - MIN(s.ts) AS span_ns,
  ROUND(1.0 * SUM(s.dur) / NULLIF(MAX(s.ts + s.dur) - MIN(s.ts), 0), 4) AS utilisation
FROM track q
JOIN track a ON a.id = q.parent_id AND a.name LIKE 'GPU agent %'
JOIN slice s ON s.track_id = q.id AND s.category = 'kernel'
GROUP BY q.id
ORDER BY agent, queue;
