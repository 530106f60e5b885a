-- Top kernels by total time (CPU-EP node slices and GPU dispatches).
-- Tables: slice (name, dur, category, track_id), thread_track, track.
SELECT
  s.name AS kernel,
  CASE WHEN tt.id IS NOT NULL THEN 'cpu' ELSE 'gpu' END AS device,
  COUNT(*) AS calls,
  SUM(s.dur) AS total_ns,
  CAST(AVG(s.dur) AS INT) AS mean_ns,
  MAX(s.dur) AS max_ns
FROM slice s
LEFT JOIN thread_track tt ON tt.id = s.track_id
WHERE s.category = 'kernel'
GROUP BY s.name, device
ORDER BY total_ns DESC
LIMIT 25;
