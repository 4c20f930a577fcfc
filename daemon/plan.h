/* SPDX-License-Identifier: MIT */
/*
 * An epoch's plan for one rank: which sample indices, in which order, cut
 * into batches. DistributedSampler semantics:
 *   order = permutation(seed, epoch) if shuffle, else 0..N-1;
 *   drop_last: total = floor(N/W)*W (tail dropped), and an incomplete last
 *              batch is dropped too;
 *   else:      total = ceil(N/W)*W, padded by repeating the order from its
 *              start;
 *   rank r takes order[r], order[r+W], ... (r < total).
 */
#ifndef STOKER_PLAN_H
#define STOKER_PLAN_H

#include <stdbool.h>
#include <stdint.h>

struct plan_spec {
	uint64_t samples; /* N, the data set's size */
	uint64_t seed;
	uint32_t rank, world_size;
	uint32_t batch_size;
	bool shuffle, drop_last;
};

/* -EINVAL for an impossible spec (world_size 0, rank >= world_size, ...). */
int plan_validate(const struct plan_spec *s);
/* This rank's samples per epoch, and batches per epoch. */
uint64_t plan_samples_per_epoch(const struct plan_spec *s);
uint64_t plan_batches_per_epoch(const struct plan_spec *s);
/* Samples in batch b (batch_size, or fewer for the last). */
uint32_t plan_batch_count(const struct plan_spec *s, uint64_t b);

/* This rank's ordered indices for `epoch` (malloc'd, plan_samples_per_epoch
 * of them). */
int plan_epoch_order(const struct plan_spec *s, uint64_t epoch, uint64_t **out);

#endif
