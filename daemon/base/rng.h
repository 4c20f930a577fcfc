/* SPDX-License-Identifier: MIT */
/*
 * Counter-based random numbers (Philox4x32-10, Salmon et al. 2011).
 *
 * A stream is keyed by (seed, epoch, sample index, purpose): the numbers a
 * sample draws depend on nothing else, so pixels do not depend on which
 * worker produced a sample, or when.
 */
#ifndef STOKER_RNG_H
#define STOKER_RNG_H

#include <stdint.h>

/* What a stream is for; keeps unrelated draws of one sample independent. */
enum rng_purpose {
	RNG_PERMUTATION = 1, /* the epoch's order (index unused) */
	RNG_AUGMENT = 2,     /* crop, flip and other per-sample draws */
	RNG_REPLACE = 3,     /* choosing a stand-in for an unreadable sample */
	RNG_BATCHMIX = 4,    /* a batch op's draws (index: batch * world_size + rank) */
	RNG_BGR = 5,         /* detection's bgr: the sample left in BGR order */
	RNG_ALBU = 6,        /* detection's Albumentations (pixels/albu.h) */
	RNG_CUTMIX = 7,      /* detection's CutMix (a fork of the sample's RNG_AUGMENT stream) */
	RNG_COPYPASTE = 8,   /* detection's CopyPaste, mode mixup (a fork, as RNG_CUTMIX) */
};

struct rng {
	uint32_t key[2];
	uint32_t ctr[4];
	uint32_t out[4];
	unsigned used; /* words of out[] consumed */
};

void rng_init(struct rng *r, uint64_t seed, uint64_t epoch, uint64_t index, enum rng_purpose purpose);
uint32_t rng_u32(struct rng *r);
uint64_t rng_u64(struct rng *r);
/* Uniform in [0, 1), 53 bits. */
double rng_uniform(struct rng *r);
/* Uniform in [lo, hi). */
double rng_range(struct rng *r, double lo, double hi);
/* Uniform integer in [0, n), unbiased (Lemire); n > 0. */
uint64_t rng_below(struct rng *r, uint64_t n);
/* A stream of its own for `purpose`, derived from r's seed, epoch and
 * index (not from how much of r was used): a part of a sample's draws that
 * must not shift the others, where only r is at hand. */
void rng_fork(const struct rng *r, enum rng_purpose purpose, struct rng *child);

#endif
