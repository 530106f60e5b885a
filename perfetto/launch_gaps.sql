-- Launch gaps: for each HIP launch API -> GPU kernel flow, the time from the
-- end of the API call to the kernel start (HTA's "launch delay") and the
-- API duration. Also the idle gap before each kernel on its GPU queue.
-- Tables: flow (slice_out, slice_in), slice, thread_track, thread, track.
SELECT
  api.name AS api,
  k.name AS kernel,
  EXTRACT_ARG(k.arg_set_id, 'debug.correlation_id') AS correlation_id,
  t.tid AS host_tid,
  q.name AS queue,
  api.dur AS api_ns,
  k.ts - (api.ts + api.dur) AS launch_delay_ns,
  k.ts - LAG(k.ts + k.dur) OVER (PARTITION BY k.track_id ORDER BY k.ts) AS queue_gap_ns
FROM flow f
JOIN slice api ON api.id = f.slice_out
JOIN slice k ON k.id = f.slice_in
LEFT JOIN thread_track tt ON tt.id = api.track_id
LEFT JOIN thread t USING (utid)
LEFT JOIN track q ON q.id = k.track_id
ORDER BY launch_delay_ns DESC;
