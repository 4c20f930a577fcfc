/* SPDX-License-Identifier: MIT */
/*
 * The Prometheus text exposition (version 0.0.4) of a snapshot of the
 * daemon's counters: pure, so a fixed snapshot renders to text
 * tests/unit/test_exposition.c asserts exactly. metrics.c takes the
 * snapshot on the loop thread and serves the text three ways.
 *
 * Adding a metric is a field here and one line in exposition.c: COUNTER or
 * GAUGE for a daemon-wide value, a client_family() or TIER_FAMILY() line
 * for per-client or per-tier ones.
 */
#ifndef STOKER_EXPOSITION_H
#define STOKER_EXPOSITION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "fetch.h"

/* An attached client. */
struct expo_client {
	uint64_t id;
	int pid;
	uint32_t rank, world_size;
	const char *dataset; /* escaped as a label value */
	uint64_t images, batches, wait_ns, ring_bytes, device_bytes;
	uint64_t unreadable; /* planned samples its uid may not read, replaced */
};

struct expo_snapshot {
	const char *version;
	double start_time_seconds; /* since the Unix epoch */
	uint64_t rss_bytes;
	bool draining;
	uint64_t images_served, batches_served;
	uint64_t decode_errors, decode_error_files, protocol_errors;
	uint64_t samples_decoded, samples_copied, label_errors, boxes_dropped;
	/* Remote data sets: the transfers and the fetch stage. */
	bool net;
	struct fetch_stats fetch;
	uint64_t remote_cache_hits, remote_fetched, remote_coalesced;
	uint64_t worker_busy_ns;
	uint32_t workers, worker_threads;
	double worker_busy_ratio, images_per_second;
	uint32_t clients, connections;
	uint64_t ring_bytes, memory_budget, device_bytes, gpu_memory_budget;
	/* The node cache, when there is one. */
	bool cache;
	uint64_t cache_budget, cache_bytes;
	struct cache_tier_stats tiers[CACHE_TIERS];
	const struct expo_client *clients_v;
	size_t nclients;
};

/* The text of `s`, malloc'd (*len bytes, NUL-terminated). 0 or -ENOMEM. */
int expo_render(const struct expo_snapshot *s, char **out, size_t *len);

#endif
