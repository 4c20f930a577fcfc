/* SPDX-License-Identifier: MIT */
/* fetch's retry policy (net/fetch.h): which failures are tried again, what
 * an HTTP error answer means, and how long each retry waits. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "fetch.h"

static void test_retryable(void **state)
{
	(void)state;
	/* The store, not the object: tried again. */
	assert_true(fetch_retryable(-ETIMEDOUT, 0));
	assert_true(fetch_retryable(-ECONNREFUSED, 0));
	assert_true(fetch_retryable(-ECONNRESET, 0));
	assert_true(fetch_retryable(-EHOSTUNREACH, 0));
	assert_true(fetch_retryable(-EPROTO, 206));
	assert_true(fetch_retryable(-EREMOTEIO, 0)); /* curl's other failures, no answer */
	assert_true(fetch_retryable(-EREMOTEIO, 500));
	assert_true(fetch_retryable(-EREMOTEIO, 503));
	assert_true(fetch_retryable(-EREMOTEIO, 599));
	assert_true(fetch_retryable(-EREMOTEIO, 408));
	assert_true(fetch_retryable(-EREMOTEIO, 429));
	/* The object or the request: final at once. */
	assert_false(fetch_retryable(-EREMOTEIO, 400));
	assert_false(fetch_retryable(-EREMOTEIO, 409));
	assert_false(fetch_retryable(-EREMOTEIO, 302));
	assert_false(fetch_retryable(-ENOENT, 404));
	assert_false(fetch_retryable(-EACCES, 403));
	assert_false(fetch_retryable(-EACCES, 401));
	assert_false(fetch_retryable(-ERANGE, 416));
	assert_false(fetch_retryable(-EFBIG, 200));
	assert_false(fetch_retryable(-ENOMEM, 0));
	assert_false(fetch_retryable(-EINVAL, 0));
	assert_false(fetch_retryable(-ECANCELED, 0));
}

static void test_status_error(void **state)
{
	(void)state;
	assert_int_equal(fetch_status_error(404), -ENOENT);
	assert_int_equal(fetch_status_error(401), -EACCES);
	assert_int_equal(fetch_status_error(403), -EACCES);
	assert_int_equal(fetch_status_error(416), -ERANGE);
	assert_int_equal(fetch_status_error(500), -EREMOTEIO);
	assert_int_equal(fetch_status_error(429), -EREMOTEIO);
	assert_int_equal(fetch_status_error(200), -EREMOTEIO); /* a 200 for a range request */
	/* What each means for a retry: 5xx again, 404 never. */
	assert_true(fetch_retryable(fetch_status_error(503), 503));
	assert_false(fetch_retryable(fetch_status_error(404), 404));
}

static void test_backoff(void **state)
{
	struct fetch_settings s = {.retries = 5, .backoff_ms = 100, .backoff_max_ms = 1000};

	(void)state;
	/* The bound doubles: 100, 200, 400, 800, then the cap 1000; the wait
	 * lies in [bound/2, bound], rnd choosing within. */
	assert_int_equal(fetch_backoff_ms(&s, 0, 0), 50);
	assert_int_equal(fetch_backoff_ms(&s, 0, 50), 100);
	assert_int_equal(fetch_backoff_ms(&s, 0, 51), 50);
	assert_int_equal(fetch_backoff_ms(&s, 1, 0), 100);
	assert_int_equal(fetch_backoff_ms(&s, 1, 100), 200);
	assert_int_equal(fetch_backoff_ms(&s, 2, 7), 207);
	assert_int_equal(fetch_backoff_ms(&s, 3, 400), 800);
	assert_int_equal(fetch_backoff_ms(&s, 4, 0), 500);
	assert_int_equal(fetch_backoff_ms(&s, 4, 500), 1000);
	assert_int_equal(fetch_backoff_ms(&s, 9, 500), 1000);
	/* Every rnd stays within the attempt's range. */
	for (uint32_t a = 0; a < 40; a++) {
		uint64_t bound = a >= 4 ? 1000 : 100u << a;

		for (uint64_t rnd = 0; rnd < 3000; rnd += 7) {
			uint64_t w = fetch_backoff_ms(&s, a, rnd * 0x9E3779B97F4A7C15ull);

			assert_true(w >= bound / 2 && w <= bound);
		}
	}
	/* Shifts stop at 20: a huge cap is reached at 2^20 x backoff_ms. */
	s.backoff_ms = 1;
	s.backoff_max_ms = UINT32_MAX;
	assert_int_equal(fetch_backoff_ms(&s, 20, UINT64_MAX - 1) <= (1u << 20), 1);
	assert_int_equal(fetch_backoff_ms(&s, 63, 1u << 19), 1u << 20);
	assert_int_equal(fetch_backoff_ms(&s, UINT32_MAX, 0), 1u << 19);
	/* No backoff configured: retry at once. */
	s.backoff_ms = 0;
	assert_int_equal(fetch_backoff_ms(&s, 0, 12345), 0);
	assert_int_equal(fetch_backoff_ms(&s, 5, 12345), 0);
	/* Odd bounds: the half rounds down. 1 ms waits 0; 3 ms waits 1 or 2. */
	s.backoff_ms = 1;
	s.backoff_max_ms = 1;
	assert_int_equal(fetch_backoff_ms(&s, 3, 0), 0);
	assert_int_equal(fetch_backoff_ms(&s, 3, 1), 0);
	s.backoff_max_ms = 3;
	assert_int_equal(fetch_backoff_ms(&s, 3, 0), 1);
	assert_int_equal(fetch_backoff_ms(&s, 3, 1), 2);
	assert_int_equal(fetch_backoff_ms(&s, 3, 2), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_retryable),
		cmocka_unit_test(test_status_error),
		cmocka_unit_test(test_backoff),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
