// aaco-exporter "sched" collector: in-kernel aggregation on stable tracepoints.
//
// Tracepoints: sched:sched_wakeup, sched:sched_wakeup_new, sched:sched_switch,
// sched:sched_migrate_task, exceptions:page_fault_user (when HAVE_PF_USER).
// No kprobes and no kernel struct reads: only tracepoint fields and helpers.
//
// Compile-time knobs (cflags): MAX_CPUS, NSLOTS, CGROUP_ID (0 = off),
// HAVE_PF_USER. See docs/sched.md for the map layout and the definitions.

#define AACO_COMM_LEN 16
#define STATE_MASK 0xff  // TASK_REPORT bits; 0 means runnable, preempted = 0x100

struct tstats {
    u64 runq_wait_ns;    // sum of completed waits (wakeup/preempt -> switch-in)
    u64 run_ns;          // sum of completed on-CPU slices (switch-in -> switch-out)
    u64 voluntary;       // switch-outs with prev_state & STATE_MASK != 0
    u64 involuntary;     // switch-outs with prev_state & STATE_MASK == 0
    u64 migrations;      // sched_migrate_task with pid == tid
    u64 faults;          // exceptions:page_fault_user raised by the thread
    u64 switch_ins;      // every switch-in (next_pid == tid)
    u64 no_start;        // switch-ins whose wait start was not seen
    u64 no_slice_start;  // switch-outs whose switch-in was not seen
    u64 unseen_ns;       // their wait start -> switch-out: hidden wait + slice
    u64 last_run_start;  // start of the most recent completed on-CPU slice
    u64 last_wait_start; // start of the most recent completed wait
    u64 last_unseen_wait_start; // start of the most recent wait ended unseen
    u32 tgid;
    char comm[AACO_COMM_LEN];
};

struct wait_t {
    u64 ts;   // runnable since (bpf_ktime_get_ns)
    u32 cpu;  // run queue it waits on (target_cpu / current cpu / dest_cpu)
    u32 tgid;
};

struct cpuw {
    s64 n;     // watched threads waiting on this CPU's run queue
    u32 tgid;  // process of the last watched thread that started waiting here
    u32 pad;
};

struct hkey {
    u32 tid;
    u32 slot;  // floor(log2(wait_ns)), clamped to NSLOTS - 1
};

struct pkey {
    u32 tgid;  // process that was waiting
    char comm[AACO_COMM_LEN];  // non-watched task switched in meanwhile
};

BPF_HASH(watched_tgids, u32, u8, 4096);    // user space: processes to watch
BPF_HASH(tids, u32, u32, 65536);           // tid -> tgid of watched threads
BPF_HASH(stats, u32, struct tstats, 65536);
BPF_HASH(hist, struct hkey, u64, 65536);
BPF_HASH(waiting, u32, struct wait_t, 65536);
BPF_HASH(oncpu, u32, u64, 65536);          // tid -> on CPU since
// tid -> when user space started watching it, until its first sched event: a
// thread already on CPU then (alone on its core, it may not switch out for
// seconds) has its slice counted from the watch start, not lost
BPF_HASH(watch_start, u32, u64, 65536);
BPF_ARRAY(cpu_waiters, struct cpuw, MAX_CPUS);
BPF_HASH(preempt, struct pkey, u64, 16384);

// tgid of current if it is watched (by tgid set or cgroup), else 0.
static __always_inline u32 current_watched(u32 tid) {
    u32 *known = tids.lookup(&tid);
    if (known)
        return *known;
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    if (tgid == 0)
        return 0;
    int hit = watched_tgids.lookup(&tgid) != NULL;
#if CGROUP_ID
    if (!hit && bpf_get_current_cgroup_id() == CGROUP_ID)
        hit = 1;
#endif
    if (!hit)
        return 0;
    tids.update(&tid, &tgid);
    return tgid;
}

static __always_inline struct tstats *stats_of(u32 tid, u32 tgid) {
    struct tstats zero = {};
    zero.tgid = tgid;
    return stats.lookup_or_try_init(&tid, &zero);
}

static __always_inline void cpu_add(u32 cpu, s64 d, u32 tgid) {
    struct cpuw *c = cpu_waiters.lookup(&cpu);
    if (!c)
        return;
    __sync_fetch_and_add(&c->n, d);
    if (d > 0)
        c->tgid = tgid;
}

static __always_inline void wait_end(u32 tid) {
    struct wait_t *w = waiting.lookup(&tid);
    if (!w)
        return;
    cpu_add(w->cpu, -1, 0);
    waiting.delete(&tid);
}

static __always_inline void wait_begin(u32 tid, u32 tgid, u32 cpu, u64 now) {
    struct wait_t w = {.ts = now, .cpu = cpu, .tgid = tgid};
    waiting.update(&tid, &w);
    cpu_add(cpu, 1, tgid);
}

static __always_inline int on_wakeup(u32 tid, u32 cpu) {
    u32 *tgid = tids.lookup(&tid);
    if (!tgid)
        return 0;
    watch_start.delete(&tid);  // it was asleep, not on CPU
    // already waiting, or woken while still on CPU: no new wait starts
    if (waiting.lookup(&tid) || oncpu.lookup(&tid))
        return 0;
    wait_begin(tid, *tgid, cpu, bpf_ktime_get_ns());
    return 0;
}

TRACEPOINT_PROBE(sched, sched_wakeup) {
    return on_wakeup(args->pid, args->target_cpu);
}

TRACEPOINT_PROBE(sched, sched_wakeup_new) {
    return on_wakeup(args->pid, args->target_cpu);
}

TRACEPOINT_PROBE(sched, sched_switch) {
    u64 now = bpf_ktime_get_ns();
    u32 cpu = bpf_get_smp_processor_id();
    u32 prev = args->prev_pid;
    u32 next = args->next_pid;

    // switch-out: prev is current here
    if (prev) {
        u32 ptgid = current_watched(prev);
        if (ptgid) {
            struct tstats *s = stats_of(prev, ptgid);
            u64 *since = oncpu.lookup(&prev);
            u64 *ws = since ? NULL : watch_start.lookup(&prev);
            if (s) {
                if (since) {
                    __sync_fetch_and_add(&s->run_ns, now - *since);
                    s->last_run_start = *since;
                } else if (ws) {  // on CPU since before the watch began
                    __sync_fetch_and_add(&s->run_ns, now - *ws);
                    s->last_run_start = *ws;
                } else {
                    // the switch-in fired no sched_switch we saw (Firecracker
                    // VMs: switches from the VM agent's threads are untraced),
                    // or the thread was learnt at this switch-out: its slice
                    // and the wait before it are lost, and counted here;
                    // their sum is known when the wait start was seen
                    __sync_fetch_and_add(&s->no_slice_start, 1);
                    struct wait_t *lw = waiting.lookup(&prev);
                    if (lw) {
                        if (now > lw->ts)
                            __sync_fetch_and_add(&s->unseen_ns, now - lw->ts);
                        // user space may have credited this wait as in
                        // progress: it takes the credit back (in unseen_ns)
                        s->last_unseen_wait_start = lw->ts;
                    }
                }
                __builtin_memcpy(s->comm, args->prev_comm, AACO_COMM_LEN);
            }
            if (since)
                oncpu.delete(&prev);
            watch_start.delete(&prev);
            wait_end(prev);
            if ((args->prev_state & STATE_MASK) == 0) {
                if (s)
                    __sync_fetch_and_add(&s->involuntary, 1);
                wait_begin(prev, ptgid, cpu, now);
            } else if (s) {
                __sync_fetch_and_add(&s->voluntary, 1);
            }
        }
    }

    // switch-in
    if (!next)
        return 0;
    u32 *ntgid = tids.lookup(&next);
    if (ntgid) {
        u32 tgid = *ntgid;
        struct tstats *s = stats_of(next, tgid);
        struct wait_t *w = waiting.lookup(&next);
        if (s) {
            __sync_fetch_and_add(&s->switch_ins, 1);
            if (w) {
                u64 d = now - w->ts;
                __sync_fetch_and_add(&s->runq_wait_ns, d);
                s->last_wait_start = w->ts;
                u32 slot = d ? bpf_log2l(d) - 1 : 0;
                if (slot >= NSLOTS)
                    slot = NSLOTS - 1;
                struct hkey hk = {.tid = next, .slot = slot};
                u64 zero = 0;
                u64 *c = hist.lookup_or_try_init(&hk, &zero);
                if (c)
                    __sync_fetch_and_add(c, 1);
            } else {
                __sync_fetch_and_add(&s->no_start, 1);
            }
        }
        wait_end(next);
        watch_start.delete(&next);
        oncpu.update(&next, &now);
        return 0;
    }
    wait_end(next);  // stale entry of a thread no longer watched
    // a task outside the watched set takes a CPU where a watched one waits
    struct cpuw *c = cpu_waiters.lookup(&cpu);
    if (c && c->n > 0 && c->tgid) {
        struct pkey pk = {.tgid = c->tgid};
        __builtin_memcpy(pk.comm, args->next_comm, AACO_COMM_LEN);
        u64 zero = 0;
        u64 *n = preempt.lookup_or_try_init(&pk, &zero);
        if (n)
            __sync_fetch_and_add(n, 1);
    }
    return 0;
}

TRACEPOINT_PROBE(sched, sched_migrate_task) {
    u32 tid = args->pid;
    struct wait_t *w = waiting.lookup(&tid);
    if (w) {
        u32 dest = args->dest_cpu;
        cpu_add(w->cpu, -1, 0);
        cpu_add(dest, 1, w->tgid);
        w->cpu = dest;
    }
    u32 *tgid = tids.lookup(&tid);
    if (!tgid)
        return 0;
    struct tstats *s = stats_of(tid, *tgid);
    if (s)
        __sync_fetch_and_add(&s->migrations, 1);
    return 0;
}

#if HAVE_PF_USER
TRACEPOINT_PROBE(exceptions, page_fault_user) {
    u32 tid = bpf_get_current_pid_tgid();
    u32 tgid = current_watched(tid);
    if (!tgid)
        return 0;
    struct tstats *s = stats_of(tid, tgid);
    if (s)
        __sync_fetch_and_add(&s->faults, 1);
    return 0;
}
#endif
