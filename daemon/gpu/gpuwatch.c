/* SPDX-License-Identifier: MIT */
#include "gpuwatch.h"

#define SECOND 1000000000ull

const struct gpuwatch_policy gpuwatch_default = {
	.query_after_ns = 2 * SECOND,
	/* A batch's copy and conversion take milliseconds; a minute is stuck. */
	.stuck_after_ns = 60 * SECOND,
	/* A trainer's queued work before a release is a few steps; half an
	 * hour (torch.distributed's collective timeouts are of that order)
	 * means it will not come. */
	.release_after_ns = 1800 * SECOND,
	.callback_after_ns = 5 * SECOND,
};

bool gpuwatch_should_query(const struct gpuwatch_policy *p, const struct gpuwatch_obs *o)
{
	return o->outstanding && o->now_ns >= o->oldest_ns && o->now_ns - o->oldest_ns >= p->query_after_ns;
}

enum gpuwatch_verdict gpuwatch_judge(const struct gpuwatch_policy *p, struct gpuwatch_state *st,
				     const struct gpuwatch_obs *o)
{
	if (!o->outstanding) {
		*st = (struct gpuwatch_state){0};
		return GPUWATCH_IDLE;
	}
	if (st->oldest_ns != o->oldest_ns) /* another copy is the oldest now: start over */
		*st = (struct gpuwatch_state){.oldest_ns = o->oldest_ns};
	if (o->query < 0)
		return GPUWATCH_FAIL_ERROR;
	if (o->query == 0) {
		/* Everything queued has run, yet callbacks are missing. */
		if (!st->done_seen_ns)
			st->done_seen_ns = o->now_ns;
		return o->now_ns - st->done_seen_ns >= p->callback_after_ns ? GPUWATCH_COMPLETE : GPUWATCH_RUNNING;
	}
	st->done_seen_ns = 0;
	if (!o->released) {
		st->released_seen_ns = 0;
		if (p->release_after_ns && o->now_ns - o->oldest_ns >= p->release_after_ns)
			return GPUWATCH_FAIL_CLIENT;
		return GPUWATCH_WAIT_CLIENT;
	}
	if (!st->released_seen_ns)
		st->released_seen_ns = o->now_ns;
	return o->now_ns - st->released_seen_ns >= p->stuck_after_ns ? GPUWATCH_FAIL_STUCK : GPUWATCH_RUNNING;
}

const char *gpuwatch_verdict_name(enum gpuwatch_verdict v)
{
	switch (v) {
	case GPUWATCH_IDLE: return "idle";
	case GPUWATCH_WAIT_CLIENT: return "waiting for the client's release";
	case GPUWATCH_RUNNING: return "running";
	case GPUWATCH_COMPLETE: return "done without its callbacks";
	case GPUWATCH_FAIL_ERROR: return "the GPU reported an error";
	case GPUWATCH_FAIL_STUCK: return "a copy into GPU memory did not finish";
	case GPUWATCH_FAIL_CLIENT: return "the client's release never reached the GPU";
	}
	return "?";
}
