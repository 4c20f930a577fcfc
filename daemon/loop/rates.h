/* SPDX-License-Identifier: MIT */
/*
 * The statistics' arithmetic (control.c): rates and busy shares between the
 * oldest sample of a window and now. Pure: tests/unit/test_rates.c.
 */
#ifndef STOKER_RATES_H
#define STOKER_RATES_H

#include <stdint.h>

/* Where the oldest sample lies in a ring of `window` samples of which
 * `taken` have been written (the next goes to taken % window). */
static inline unsigned rates_oldest(unsigned taken, unsigned window)
{
	return taken < window ? 0 : taken % window;
}

/* Events per second from count0 at t0_ns to count1 at t1_ns; 0 when no time
 * passed (t1_ns <= t0_ns). */
static inline double rates_per_second(uint64_t t0_ns, uint64_t t1_ns, uint64_t count0, uint64_t count1)
{
	if (t1_ns <= t0_ns)
		return 0.0;
	return (double)(count1 - count0) / ((double)(t1_ns - t0_ns) / 1e9);
}

/* The share of the time from t0_ns to t1_ns that `parts` (0 taken as 1)
 * spent busy, busy0_ns and busy1_ns being their summed busy time then:
 * the workers' busy ratio, a client's stall (its time in next()). At most
 * 1; 0 when no time passed. */
static inline double rates_busy_share(uint64_t t0_ns, uint64_t t1_ns, uint64_t busy0_ns, uint64_t busy1_ns,
				      uint32_t parts)
{
	double share;

	if (t1_ns <= t0_ns)
		return 0.0;
	share = (double)(busy1_ns - busy0_ns) / 1e9 / ((double)(t1_ns - t0_ns) / 1e9) / (parts ? parts : 1);
	return share > 1.0 ? 1.0 : share;
}

#endif
