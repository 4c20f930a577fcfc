/* SPDX-License-Identifier: MIT */
/*
 * The node-global sample cache, shared by every session and kept while the
 * daemon runs. Two tiers under one byte budget:
 *   CACHE_ENCODED  a file's bytes, as read;
 *   CACHE_DECODED  a file's decoded RGB pixels (at a DCT-reduced size, see
 *                  augment.h), which saves the decode as well as the read.
 * Entries are keyed by the file's path and validated against its size and
 * mtime, so a changed file is read again.
 *
 * Policy: MINIO (as CoorDL) admits entries until the budget is full and then
 * keeps what it has: an epoch over a data set larger than the cache still
 * hits on the cached part, where LRU, evicting in scan order, would hit
 * almost nothing. LRU is kept for comparison (bench/).
 *
 * Thread safety: any thread. The table is split into shards, each with its
 * own mutex, held only to look up, copy out or insert one entry; the byte
 * count is one atomic. No lock is held while a file is read or decoded.
 */
#ifndef STOKER_CACHE_H
#define STOKER_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum cache_tier {
	CACHE_ENCODED = 0,
	CACHE_DECODED = 1,
	CACHE_TIERS = 2,
};

enum cache_policy {
	CACHE_MINIO = 0,
	CACHE_LRU = 1,
};

/* What identifies a file's content. */
struct cache_key {
	uint64_t path_hash;
	uint64_t size;
	int64_t mtime_ns;
};

/* Facts stored beside decoded pixels. */
struct cache_image {
	uint32_t width, height;           /* of the stored pixels */
	uint32_t full_width, full_height; /* of the JPEG */
	uint32_t denom;                   /* DCT reduction it was decoded at */
	uint8_t orientation;              /* the file's EXIF orientation (pipeline_image's) */
};

struct cache_tier_stats {
	uint64_t hits, misses, entries, bytes, evictions, rejected;
};

struct cache;

int cache_new(uint64_t budget_bytes, enum cache_policy policy, struct cache **out);
void cache_free(struct cache *c);

uint64_t cache_key_hash(const char *dir, const char *name);

/*
 * Copy the entry's data into *buf (grown as needed). Returns its length, or
 * -ENOENT on a miss (counted). For CACHE_DECODED, *image is filled too.
 */
int64_t cache_get(struct cache *c, enum cache_tier tier, const struct cache_key *key, uint8_t **buf, size_t *cap,
		  struct cache_image *image);

/* Does the cache hold the entry? Not counted as a hit or miss: for the
 * fetch stage, which only needs to know whether to fetch. */
bool cache_contains(struct cache *c, enum cache_tier tier, const struct cache_key *key);

/*
 * Offer data for caching (copied). 0 when stored, -ENOSPC when the policy
 * declines (MINIO: full; LRU: larger than the budget), -EEXIST when another
 * thread stored it first, -ENOMEM.
 */
int cache_put(struct cache *c, enum cache_tier tier, const struct cache_key *key, const uint8_t *data, size_t len,
	      const struct cache_image *image);

/* Change the budget; with LRU, shrinking evicts at once. */
void cache_set_budget(struct cache *c, uint64_t budget_bytes);
uint64_t cache_budget(const struct cache *c);
uint64_t cache_bytes(const struct cache *c);
enum cache_policy cache_policy(const struct cache *c);
void cache_stats(struct cache *c, enum cache_tier tier, struct cache_tier_stats *out);

#endif
