/* SPDX-License-Identifier: MIT */
/*
 * The GPU watchdog's policy (daemon/gpu/gpuwatch.c): when a device ring's
 * outstanding copy is looked at, and what a stream's answer means: waiting
 * on the client's release (fine, however long a training step takes, up to
 * release_after), running, stuck, failed, or done with its callbacks lost
 * (a context error stops cuLaunchHostFunc callbacks).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "gpuwatch.h"

#define S 1000000000ull

static const struct gpuwatch_policy policy = {.query_after_ns = 2 * S,
					      .stuck_after_ns = 60 * S,
					      .release_after_ns = 1800 * S,
					      .callback_after_ns = 5 * S};

static struct gpuwatch_obs obs(uint64_t now, uint64_t oldest, bool released, int query)
{
	return (struct gpuwatch_obs){.now_ns = now,
				     .outstanding = true,
				     .oldest_ns = oldest,
				     .released = released,
				     .query = query};
}

static void test_when_to_query(void **state)
{
	struct gpuwatch_obs o = obs(1000 * S + S, 1000 * S, false, 1);

	(void)state;
	assert_false(gpuwatch_should_query(&policy, &o)); /* a second old: copies take milliseconds */
	o.now_ns = 1000 * S + 2 * S;
	assert_true(gpuwatch_should_query(&policy, &o));
	o.outstanding = false;
	assert_false(gpuwatch_should_query(&policy, &o)); /* nothing outstanding: no query at all */
	o = obs(5 * S, 10 * S, false, 1);                 /* a clock that went back: not "old" */
	assert_false(gpuwatch_should_query(&policy, &o));
}

static void test_waiting_on_the_client_is_not_stuck(void **state)
{
	struct gpuwatch_state st = {0};
	struct gpuwatch_obs o = obs(100 * S, 0, false, 1);

	(void)state;
	/* A long training step before the release: however long, up to release_after. */
	assert_int_equal(gpuwatch_judge(&policy, &st, &o), GPUWATCH_WAIT_CLIENT);
	o.now_ns = 1799 * S;
	assert_int_equal(gpuwatch_judge(&policy, &st, &o), GPUWATCH_WAIT_CLIENT);
	o.now_ns = 1800 * S;
	assert_int_equal(gpuwatch_judge(&policy, &st, &o), GPUWATCH_FAIL_CLIENT);
	/* With release_after 0 the daemon waits for ever (the client's death unblocks it). */
	{
		struct gpuwatch_policy forever = policy;

		forever.release_after_ns = 0;
		o.now_ns = 100000 * S;
		assert_int_equal(gpuwatch_judge(&forever, &st, &o), GPUWATCH_WAIT_CLIENT);
	}
}

static void test_stuck_counts_from_the_release(void **state)
{
	struct gpuwatch_state st = {0};
	struct gpuwatch_obs o = obs(500 * S, 0, false, 1);

	(void)state;
	assert_int_equal(gpuwatch_judge(&policy, &st, &o), GPUWATCH_WAIT_CLIENT);
	/* The word arrives at 600 s: the copy may run from then on. */
	o = obs(600 * S, 0, true, 1);
	assert_int_equal(gpuwatch_judge(&policy, &st, &o), GPUWATCH_RUNNING);
	o.now_ns = 659 * S;
	assert_int_equal(gpuwatch_judge(&policy, &st, &o), GPUWATCH_RUNNING);
	o.now_ns = 660 * S;
	assert_int_equal(gpuwatch_judge(&policy, &st, &o), GPUWATCH_FAIL_STUCK);
	/* The copy finished and the next is the oldest: its own clock. */
	o = obs(661 * S, 650 * S, true, 1);
	assert_int_equal(gpuwatch_judge(&policy, &st, &o), GPUWATCH_RUNNING);
	assert_int_equal(st.released_seen_ns, 661 * S);
}

static void test_errors_and_lost_callbacks(void **state)
{
	struct gpuwatch_state st = {0};
	struct gpuwatch_obs o = obs(10 * S, 0, true, -EIO);

	(void)state;
	assert_int_equal(gpuwatch_judge(&policy, &st, &o), GPUWATCH_FAIL_ERROR);
	assert_string_equal(gpuwatch_verdict_name(GPUWATCH_FAIL_ERROR), "the GPU reported an error");
	/* The stream says done, callbacks missing: give them callback_after, then complete. */
	st = (struct gpuwatch_state){0};
	o = obs(10 * S, 0, true, 0);
	assert_int_equal(gpuwatch_judge(&policy, &st, &o), GPUWATCH_RUNNING);
	o.now_ns = 14 * S;
	assert_int_equal(gpuwatch_judge(&policy, &st, &o), GPUWATCH_RUNNING);
	o.now_ns = 15 * S;
	assert_int_equal(gpuwatch_judge(&policy, &st, &o), GPUWATCH_COMPLETE);
	/* Nothing outstanding: idle, and the state starts over. */
	o.outstanding = false;
	assert_int_equal(gpuwatch_judge(&policy, &st, &o), GPUWATCH_IDLE);
	assert_int_equal(st.done_seen_ns, 0);
}

static void test_default_policy_is_sane(void **state)
{
	(void)state;
	assert_true(gpuwatch_default.query_after_ns > 0);
	assert_true(gpuwatch_default.query_after_ns < gpuwatch_default.stuck_after_ns);
	assert_true(gpuwatch_default.stuck_after_ns < gpuwatch_default.release_after_ns);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_when_to_query),
		cmocka_unit_test(test_waiting_on_the_client_is_not_stuck),
		cmocka_unit_test(test_stuck_counts_from_the_release),
		cmocka_unit_test(test_errors_and_lost_callbacks),
		cmocka_unit_test(test_default_policy_is_sane),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
