/* SPDX-License-Identifier: MIT */
/* The statistics' arithmetic (loop/rates.h): the window's oldest sample,
 * images per second, the workers' busy ratio and a client's stall. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "rates.h"

#define S 1000000000ull

static void test_oldest(void **state)
{
	(void)state;
	/* Until the ring is full the oldest is the first; then the next to be overwritten. */
	assert_int_equal(rates_oldest(0, 6), 0);
	assert_int_equal(rates_oldest(1, 6), 0);
	assert_int_equal(rates_oldest(5, 6), 0);
	assert_int_equal(rates_oldest(6, 6), 0);
	assert_int_equal(rates_oldest(7, 6), 1);
	assert_int_equal(rates_oldest(11, 6), 5);
	assert_int_equal(rates_oldest(12, 6), 0);
	assert_int_equal(rates_oldest(4000000001u, 6), 4000000001u % 6);
}

static void test_per_second(void **state)
{
	(void)state;
	/* 1500 images in 5 s. */
	assert_true(rates_per_second(10 * S, 15 * S, 500, 2000) == 300.0);
	/* Half a second: 10 images are 20 per second. */
	assert_true(rates_per_second(S, S + S / 2, 0, 10) == 20.0);
	/* Nothing happened; no time, or time going back: 0. */
	assert_true(rates_per_second(S, 2 * S, 7, 7) == 0.0);
	assert_true(rates_per_second(S, S, 0, 100) == 0.0);
	assert_true(rates_per_second(2 * S, S, 0, 100) == 0.0);
}

static void test_busy_share(void **state)
{
	(void)state;
	/* 4 workers over 2 s: 8 s of work is all of it, 2 s a quarter. */
	assert_true(rates_busy_share(0, 2 * S, 0, 8 * S, 4) == 1.0);
	assert_true(rates_busy_share(0, 2 * S, 10 * S, 12 * S, 4) == 0.25);
	/* More busy time than wall time (a sample taken late): capped at 1. */
	assert_true(rates_busy_share(0, 2 * S, 0, 9 * S, 4) == 1.0);
	/* 0 parts count as one: a client's stall, 1.5 s of 3 s waiting. */
	assert_true(rates_busy_share(S, 4 * S, S / 2, 2 * S, 0) == 0.5);
	assert_true(rates_busy_share(S, 4 * S, S / 2, 2 * S, 1) == 0.5);
	assert_true(rates_busy_share(S, 4 * S, 0, 4 * S, 1) == 1.0);
	/* Idle, and no time: 0. */
	assert_true(rates_busy_share(0, S, 3 * S, 3 * S, 8) == 0.0);
	assert_true(rates_busy_share(S, S, 0, S, 1) == 0.0);
	assert_true(rates_busy_share(2 * S, S, 0, S, 1) == 0.0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_oldest),
		cmocka_unit_test(test_per_second),
		cmocka_unit_test(test_busy_share),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
