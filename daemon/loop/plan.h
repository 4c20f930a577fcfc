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
 *
 * Shard order (WebDataset's, for storage slow at random reads), when
 * shard_starts is set: the shards are shuffled (if shuffle), their samples
 * laid end to end into one sequence, padded or truncated to `total` as
 * above, and cut into W contiguous runs: rank r takes run r, so each rank
 * reads whole stretches of shards. Within its run, a buffer of
 * shuffle_buffer samples shuffles the order (if shuffle): fill it, emit a
 * random one, refill. Every draw is keyed by (seed, epoch) (and the rank,
 * for the buffer), so any worker count gives the same order, and the ranks
 * together still cover the data set exactly once (padding aside).
 *
 * Repeated augmentation (repeats > 1; torchvision's RASampler, timm's
 * RepeatAugSampler): the order (permuted if shuffle) with each index
 * repeated `repeats` times in a row, padded from its start to
 * total = ceil(N * repeats / W) * W, rank r taking positions r, r+W, ...,
 * and only the first `selected` of them: floor(N // round * round / ratio)
 * (round = selected_round, default 256; ratio = selected_ratio, 0: W), or
 * ceil(N / ratio) when round is 0 or above N (timm's rule; RASampler
 * selects none below 256 samples), at most ceil(N * repeats / W). The copy number of a position (its
 * place in its run of repeats) keys the per-sample stream, so each copy is
 * augmented differently. Not with shard order or a fixed order.
 *
 * Or, with a `fixed` order (rectangular detection batches), Ultralytics'
 * ContiguousDistributedSampler: that order cut into batches (of one sample
 * when batch_size covers the data set), rank r taking a contiguous run of
 * whole batches, the first (count % W) ranks one more; no padding, no
 * shuffle, no drop_last.
 */
#ifndef STOKER_PLAN_H
#define STOKER_PLAN_H

#include <stdbool.h>
#include <stdint.h>

/* Most copies of a sample aug_repeats may ask. */
#define PLAN_MAX_REPEATS 64u

struct plan_spec {
	uint64_t samples; /* N, the data set's size */
	uint64_t seed;
	uint32_t rank, world_size;
	uint32_t batch_size;
	bool shuffle, drop_last;
	/* Shard order: shard i holds samples shard_starts[i] ..
	 * shard_starts[i+1] - 1; NULL for sample order. */
	const uint64_t *shard_starts;
	uint32_t shards;
	uint32_t shuffle_buffer; /* samples; 0 or 1: none */
	const uint64_t *fixed;   /* [samples] the order, or NULL; not owned */
	uint32_t repeats;        /* 0 or 1: none */
	uint32_t selected_round; /* repeats: RepeatAugSampler's selected_round */
	uint32_t selected_ratio; /* repeats: its selected_ratio; 0: world_size */
};

/* -EINVAL for an impossible spec (world_size 0, rank >= world_size, ...). */
int plan_validate(const struct plan_spec *s);
/* This rank's samples per epoch, and batches per epoch. */
uint64_t plan_samples_per_epoch(const struct plan_spec *s);
uint64_t plan_batches_per_epoch(const struct plan_spec *s);
/* With a fixed order: the positions [*first, *end) of it this rank takes. */
void plan_fixed_range(const struct plan_spec *s, uint64_t *first, uint64_t *end);
/* Samples in batch b (batch_size, or fewer for the last). */
uint32_t plan_batch_count(const struct plan_spec *s, uint64_t b);

/* Repeated augmentation: the copy number (0 .. repeats-1) of this rank's
 * k-th sample of an epoch; 0 without repeats. */
uint32_t plan_copy(const struct plan_spec *s, uint64_t k);

/* This rank's ordered indices for `epoch` (malloc'd, plan_samples_per_epoch
 * of them). */
int plan_epoch_order(const struct plan_spec *s, uint64_t epoch, uint64_t **out);

#endif
