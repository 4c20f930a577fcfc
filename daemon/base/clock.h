/* SPDX-License-Identifier: MIT */
/* The daemon's one monotonic clock: deadlines, ages, rates, busy time. */
#ifndef STOKER_CLOCK_H
#define STOKER_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds. */
static inline uint64_t monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
