-- Per-iteration latency with the kernel time nested inside it (CPU EP):
-- kernel_ns / latency_ns is the per-iteration kernel-active ratio.
-- Tables: slice (depth/parent_id nesting), args (debug annotations), thread, process.
SELECT
  p.name AS process,
  t.tid,
  EXTRACT_ARG(it.arg_set_id, 'debug.iteration') AS iteration,
  it.ts,
  it.dur AS latency_ns,
  (SELECT COUNT(*) FROM slice k WHERE k.parent_id = it.id AND k.category = 'kernel') AS kernels,
  (SELECT IFNULL(SUM(k.dur), 0) FROM slice k
     WHERE k.parent_id = it.id AND k.category = 'kernel') AS kernel_ns
FROM slice it
LEFT JOIN thread_track tt ON tt.id = it.track_id
LEFT JOIN thread t USING (utid)
LEFT JOIN process p USING (upid)
WHERE it.category = 'iteration'
ORDER BY it.ts;
