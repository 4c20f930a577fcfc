/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "grow.h"

#define CACHE_SHARDS 64
#define CACHE_MIN_BUCKETS 64

struct entry {
	struct entry *hash_next;
	struct entry *lru_prev, *lru_next; /* most recent at head */
	enum cache_tier tier;
	struct cache_key key;
	struct cache_image image;
	size_t len;
	uint8_t data[];
};

struct shard {
	pthread_mutex_t lock;
	struct entry **buckets;
	size_t nbuckets, nentries;
	struct entry *lru_head, *lru_tail;
	struct cache_tier_stats stats[CACHE_TIERS];
	/* Keep shards on their own cache lines: workers hammer them. */
	char pad[64];
};

struct cache {
	enum cache_policy policy;
	_Atomic uint64_t budget;
	_Atomic uint64_t used;
	_Atomic unsigned trim_cursor;
	struct shard shards[CACHE_SHARDS];
};

static size_t entry_charge(size_t len)
{
	return sizeof(struct entry) + len;
}

uint64_t cache_key_hash(const char *dir, const char *name)
{
	/* FNV-1a over "dir/name", then a final mix for the shard bits. */
	uint64_t h = 0xcbf29ce484222325ull;

	for (const char *p = dir; p && *p; p++)
		h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
	h = (h ^ '/') * 0x100000001b3ull;
	for (const char *p = name; *p; p++)
		h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	return h;
}

static struct shard *shard_of(struct cache *c, uint64_t hash)
{
	return &c->shards[hash >> 58];
}

static size_t bucket_index(uint64_t hash, enum cache_tier tier, size_t nbuckets)
{
	return (size_t)((hash ^ (uint64_t)tier * 0x9E3779B97F4A7C15ull) & (nbuckets - 1));
}

static size_t bucket_of(const struct shard *s, uint64_t hash, enum cache_tier tier)
{
	return bucket_index(hash, tier, s->nbuckets);
}

int cache_new(uint64_t budget_bytes, enum cache_policy policy, struct cache **out)
{
	struct cache *c = calloc(1, sizeof(*c));
	int r = 0;

	if (!c)
		return -ENOMEM;
	c->policy = policy;
	atomic_init(&c->budget, budget_bytes);
	for (int i = 0; i < CACHE_SHARDS; i++) {
		struct shard *s = &c->shards[i];

		s->nbuckets = CACHE_MIN_BUCKETS;
		s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
		if (!s->buckets) {
			r = -ENOMEM;
			break;
		}
		pthread_mutex_init(&s->lock, NULL);
	}
	if (r < 0) {
		cache_free(c);
		return r;
	}
	*out = c;
	return 0;
}

void cache_free(struct cache *c)
{
	if (!c)
		return;
	for (int i = 0; i < CACHE_SHARDS; i++) {
		struct shard *s = &c->shards[i];
		struct entry *e, *next;

		if (!s->buckets)
			continue;
		for (e = s->lru_head; e; e = next) {
			next = e->lru_next;
			free(e);
		}
		free(s->buckets);
		pthread_mutex_destroy(&s->lock);
	}
	free(c);
}

static void lru_unlink(struct shard *s, struct entry *e)
{
	if (e->lru_prev)
		e->lru_prev->lru_next = e->lru_next;
	else
		s->lru_head = e->lru_next;
	if (e->lru_next)
		e->lru_next->lru_prev = e->lru_prev;
	else
		s->lru_tail = e->lru_prev;
	e->lru_prev = e->lru_next = NULL;
}

static void lru_push_front(struct shard *s, struct entry *e)
{
	e->lru_prev = NULL;
	e->lru_next = s->lru_head;
	if (s->lru_head)
		s->lru_head->lru_prev = e;
	s->lru_head = e;
	if (!s->lru_tail)
		s->lru_tail = e;
}

/* Remove `e` from its shard (locked) and free it. */
static void shard_remove(struct cache *c, struct shard *s, struct entry *e, bool evicted)
{
	struct entry **pp = &s->buckets[bucket_of(s, e->key.path_hash, e->tier)];

	while (*pp != e)
		pp = &(*pp)->hash_next;
	*pp = e->hash_next;
	lru_unlink(s, e);
	s->nentries--;
	s->stats[e->tier].entries--;
	s->stats[e->tier].bytes -= e->len;
	if (evicted)
		s->stats[e->tier].evictions++;
	atomic_fetch_sub_explicit(&c->used, entry_charge(e->len), memory_order_relaxed);
	free(e);
}

/* Find the entry for (tier, path); a stale one (file changed) is dropped. */
static struct entry *shard_find(struct cache *c, struct shard *s, enum cache_tier tier, const struct cache_key *key)
{
	struct entry *e = s->buckets[bucket_of(s, key->path_hash, tier)];

	for (; e; e = e->hash_next) {
		if (e->tier != tier || e->key.path_hash != key->path_hash)
			continue;
		if (e->key.size == key->size && e->key.mtime_ns == key->mtime_ns)
			return e;
		shard_remove(c, s, e, false);
		return NULL;
	}
	return NULL;
}

/* Double the bucket array when entries outnumber buckets. */
static void shard_grow(struct shard *s)
{
	size_t n = s->nbuckets * 2;
	struct entry **b = calloc(n, sizeof(*b));

	if (!b)
		return; /* longer chains, still correct */
	for (size_t i = 0; i < s->nbuckets; i++) {
		struct entry *e = s->buckets[i], *next;

		for (; e; e = next) {
			size_t k = bucket_index(e->key.path_hash, e->tier, n);
			next = e->hash_next;
			e->hash_next = b[k];
			b[k] = e;
		}
	}
	free(s->buckets);
	s->buckets = b;
	s->nbuckets = n;
}

int64_t cache_get(struct cache *c, enum cache_tier tier, const struct cache_key *key, uint8_t **buf, size_t *cap,
		  struct cache_image *image)
{
	struct shard *s = shard_of(c, key->path_hash);
	struct entry *e;
	int64_t r;

	pthread_mutex_lock(&s->lock);
	e = shard_find(c, s, tier, key);
	if (!e) {
		s->stats[tier].misses++;
		r = -ENOENT;
		goto out;
	}
	if (grow((void **)buf, cap, e->len, 1) < 0) {
		r = -ENOMEM;
		goto out;
	}
	if (e->len) /* an empty file's buffer may still be NULL */
		memcpy(*buf, e->data, e->len);
	if (image)
		*image = e->image;
	if (c->policy == CACHE_LRU) {
		lru_unlink(s, e);
		lru_push_front(s, e);
	}
	s->stats[tier].hits++;
	r = (int64_t)e->len;
out:
	pthread_mutex_unlock(&s->lock);
	return r;
}

bool cache_contains(struct cache *c, enum cache_tier tier, const struct cache_key *key)
{
	struct shard *s = shard_of(c, key->path_hash);
	bool found;

	pthread_mutex_lock(&s->lock);
	found = shard_find(c, s, tier, key) != NULL;
	pthread_mutex_unlock(&s->lock);
	return found;
}

/* Take `charge` bytes of the budget, or say there is no room. */
static bool reserve(struct cache *c, uint64_t charge)
{
	uint64_t used = atomic_load_explicit(&c->used, memory_order_relaxed);
	uint64_t budget = atomic_load_explicit(&c->budget, memory_order_relaxed);

	do {
		if (used + charge > budget)
			return false;
	} while (!atomic_compare_exchange_weak_explicit(&c->used, &used, used + charge, memory_order_relaxed,
							memory_order_relaxed));
	return true;
}

/* Evict least recently used entries, shard by shard (one lock at a time),
 * until the cache fits its budget. */
static void trim(struct cache *c)
{
	unsigned start = atomic_fetch_add_explicit(&c->trim_cursor, 1, memory_order_relaxed);
	bool progress = true;

	while (progress) {
		progress = false;
		for (unsigned i = 0; i < CACHE_SHARDS; i++) {
			struct shard *s = &c->shards[(start + i) % CACHE_SHARDS];

			if (atomic_load_explicit(&c->used, memory_order_relaxed) <=
			    atomic_load_explicit(&c->budget, memory_order_relaxed))
				return;
			pthread_mutex_lock(&s->lock);
			/* A few from each shard approximates one global LRU order. */
			for (int k = 0; k < 4 && s->lru_tail; k++) {
				shard_remove(c, s, s->lru_tail, true);
				progress = true;
			}
			pthread_mutex_unlock(&s->lock);
		}
	}
}

int cache_put(struct cache *c, enum cache_tier tier, const struct cache_key *key, const uint8_t *data, size_t len,
	      const struct cache_image *image)
{
	struct shard *s = shard_of(c, key->path_hash);
	uint64_t charge = entry_charge(len);
	struct entry *e;
	size_t b;

	if (c->policy == CACHE_MINIO) {
		if (!reserve(c, charge)) {
			pthread_mutex_lock(&s->lock);
			s->stats[tier].rejected++;
			pthread_mutex_unlock(&s->lock);
			return -ENOSPC;
		}
	} else {
		if (charge > atomic_load_explicit(&c->budget, memory_order_relaxed))
			return -ENOSPC;
		atomic_fetch_add_explicit(&c->used, charge, memory_order_relaxed);
	}
	e = malloc(sizeof(*e) + len);
	if (!e) {
		atomic_fetch_sub_explicit(&c->used, charge, memory_order_relaxed);
		return -ENOMEM;
	}
	memset(e, 0, sizeof(*e));
	e->tier = tier;
	e->key = *key;
	if (image)
		e->image = *image;
	e->len = len;
	if (len)
		memcpy(e->data, data, len);

	pthread_mutex_lock(&s->lock);
	if (shard_find(c, s, tier, key)) {
		pthread_mutex_unlock(&s->lock);
		atomic_fetch_sub_explicit(&c->used, charge, memory_order_relaxed);
		free(e);
		return -EEXIST;
	}
	if (s->nentries >= s->nbuckets)
		shard_grow(s);
	b = bucket_of(s, key->path_hash, tier);
	e->hash_next = s->buckets[b];
	s->buckets[b] = e;
	lru_push_front(s, e);
	s->nentries++;
	s->stats[tier].entries++;
	s->stats[tier].bytes += len;
	pthread_mutex_unlock(&s->lock);

	if (c->policy == CACHE_LRU)
		trim(c);
	return 0;
}

void cache_set_budget(struct cache *c, uint64_t budget_bytes)
{
	atomic_store_explicit(&c->budget, budget_bytes, memory_order_relaxed);
	trim(c);
}

uint64_t cache_budget(const struct cache *c)
{
	return atomic_load_explicit(&c->budget, memory_order_relaxed);
}

uint64_t cache_bytes(const struct cache *c)
{
	return atomic_load_explicit(&c->used, memory_order_relaxed);
}

enum cache_policy cache_policy(const struct cache *c)
{
	return c->policy;
}

void cache_stats(struct cache *c, enum cache_tier tier, struct cache_tier_stats *out)
{
	struct cache_tier_stats sum = {0};

	for (int i = 0; i < CACHE_SHARDS; i++) {
		struct shard *s = &c->shards[i];

		pthread_mutex_lock(&s->lock);
		sum.hits += s->stats[tier].hits;
		sum.misses += s->stats[tier].misses;
		sum.entries += s->stats[tier].entries;
		sum.bytes += s->stats[tier].bytes;
		sum.evictions += s->stats[tier].evictions;
		sum.rejected += s->stats[tier].rejected;
		pthread_mutex_unlock(&s->lock);
	}
	*out = sum;
}
