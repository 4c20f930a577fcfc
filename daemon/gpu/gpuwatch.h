/* SPDX-License-Identifier: MIT */
/*
 * The GPU watchdog's policy: what to make of a device ring whose copies
 * have been outstanding a while. CUDA's host callbacks (cuLaunchHostFunc)
 * do not run after a context error, so a copy that failed on the GPU would
 * otherwise stall its session silently; daemon/gpu/gpu.c asks the stream
 * (cuStreamQuery) once a copy has been outstanding longer than
 * query_after_ns and acts on the verdict. Pure logic, no CUDA: unit-tested
 * in tests/unit/test_gpuwatch.c.
 *
 * A copy waits first for the client's release word (the client's GPU work
 * queued before its release: a training step, legitimately seconds), then
 * runs (milliseconds). The daemon reads the word from the CPU, so it can
 * tell the two apart: a copy whose wait is satisfied and that has not
 * finished after stuck_after_ns is stuck; a wait that has not been
 * satisfied after release_after_ns (0: never) is the client's fault.
 */
#ifndef STOKER_GPUWATCH_H
#define STOKER_GPUWATCH_H

#include <stdbool.h>
#include <stdint.h>

struct gpuwatch_policy {
	uint64_t query_after_ns;    /* look at a ring whose oldest copy is this old */
	uint64_t stuck_after_ns;    /* a copy running this long (its wait satisfied) is stuck */
	uint64_t release_after_ns;  /* a release word this late fails the ring; 0: wait for ever */
	uint64_t callback_after_ns; /* the stream done, its callbacks this late: complete them */
};

/* What gpu.c uses. */
extern const struct gpuwatch_policy gpuwatch_default;

/* What the watchdog saw of one ring, now. */
struct gpuwatch_obs {
	uint64_t now_ns;
	bool outstanding;   /* copies queued whose callback has not come */
	uint64_t oldest_ns; /* when the oldest of them was queued */
	bool released;      /* its slot's release word has reached the copy's target */
	int query;          /* cuStreamQuery: 0 done, 1 not ready, < 0 an error (-errno) */
};

/* Per ring, kept by the caller between looks (zeroed at the start). */
struct gpuwatch_state {
	uint64_t released_seen_ns; /* the oldest copy's wait first seen satisfied; 0: not yet */
	uint64_t done_seen_ns;     /* the stream first seen done with copies outstanding; 0: not yet */
	uint64_t oldest_ns;        /* the copy the two above are about */
};

enum gpuwatch_verdict {
	GPUWATCH_IDLE,        /* nothing outstanding, or too young to look at: no query needed */
	GPUWATCH_WAIT_CLIENT, /* waiting on the client's release: its GPU work */
	GPUWATCH_RUNNING,     /* the copy runs; not stuck yet */
	GPUWATCH_COMPLETE,    /* the stream is done but the callbacks never came: complete the copies */
	GPUWATCH_FAIL_ERROR,  /* the stream reported an error: fail the ring */
	GPUWATCH_FAIL_STUCK,  /* a copy runs far too long: fail the ring */
	GPUWATCH_FAIL_CLIENT, /* the client's release never came: fail the ring */
};

/* Whether the ring needs a cuStreamQuery now (obs.query not yet filled). */
bool gpuwatch_should_query(const struct gpuwatch_policy *p, const struct gpuwatch_obs *o);
/* The verdict on a ring after its query; updates `st`. */
enum gpuwatch_verdict gpuwatch_judge(const struct gpuwatch_policy *p, struct gpuwatch_state *st,
				     const struct gpuwatch_obs *o);
/* A verdict in words, for logs and the client's error. */
const char *gpuwatch_verdict_name(enum gpuwatch_verdict v);

#endif
