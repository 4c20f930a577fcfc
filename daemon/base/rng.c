/* SPDX-License-Identifier: MIT */
#include "rng.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

static void philox_block(const uint32_t key_in[2], const uint32_t ctr_in[4], uint32_t out[4])
{
	uint32_t k0 = key_in[0], k1 = key_in[1];
	uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];

	for (int round = 0; round < 10; round++) {
		uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
		uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
		uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
		uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
		c1 = (uint32_t)p1;
		c3 = (uint32_t)p0;
		c0 = n0;
		c2 = n2;
		k0 += PHILOX_W0;
		k1 += PHILOX_W1;
	}
	out[0] = c0;
	out[1] = c1;
	out[2] = c2;
	out[3] = c3;
}

void rng_init(struct rng *r, uint64_t seed, uint64_t epoch, uint64_t index, enum rng_purpose purpose)
{
	/* The counter carries index and epoch, so streams of different samples
	 * never overlap. */
	/* The epoch's high word joins the purpose (a small number) in the key,
	 * so every (index, epoch) pair below 2^64 x 2^56 has a counter block
	 * of its own. */
	uint64_t key = splitmix64(seed ^ splitmix64((uint64_t)purpose | (epoch >> 32) << 8));

	r->key[0] = (uint32_t)key;
	r->key[1] = (uint32_t)(key >> 32);
	r->ctr[0] = 0; /* block number within the stream */
	r->ctr[1] = (uint32_t)index;
	r->ctr[2] = (uint32_t)(index >> 32);
	r->ctr[3] = (uint32_t)epoch;
	r->used = 4;
}

void rng_fork(const struct rng *r, enum rng_purpose purpose, struct rng *child)
{
	uint64_t key = (uint64_t)r->key[1] << 32 | r->key[0];

	key = splitmix64(key ^ splitmix64((uint64_t)purpose << 56 | 0xf0f));
	child->key[0] = (uint32_t)key;
	child->key[1] = (uint32_t)(key >> 32);
	child->ctr[0] = 0;
	child->ctr[1] = r->ctr[1];
	child->ctr[2] = r->ctr[2];
	child->ctr[3] = r->ctr[3];
	child->used = 4;
}

uint32_t rng_u32(struct rng *r)
{
	if (r->used == 4) {
		philox_block(r->key, r->ctr, r->out);
		r->ctr[0]++;
		r->used = 0;
	}
	return r->out[r->used++];
}

uint64_t rng_u64(struct rng *r)
{
	uint64_t hi = rng_u32(r);
	return (hi << 32) | rng_u32(r);
}

double rng_uniform(struct rng *r)
{
	return (double)(rng_u64(r) >> 11) * 0x1.0p-53;
}

double rng_range(struct rng *r, double lo, double hi)
{
	return lo + (hi - lo) * rng_uniform(r);
}

uint64_t rng_below(struct rng *r, uint64_t n)
{
	/* Lemire's multiply-shift with rejection, on 64 bits. */
	uint64_t x = rng_u64(r);
	__uint128_t m = (__uint128_t)x * n;
	uint64_t low = (uint64_t)m;

	if (low < n) {
		uint64_t threshold = -n % n;
		while (low < threshold) {
			x = rng_u64(r);
			m = (__uint128_t)x * n;
			low = (uint64_t)m;
		}
	}
	return (uint64_t)(m >> 64);
}
