/* SPDX-License-Identifier: MIT */
/*
 * The fetch stage: before a remote data set's batch job is queued for the
 * workers, every planned sample the node cache lacks is fetched (fetch.h,
 * on its I/O thread, all of the batch at once), so workers only ever see
 * bytes that have arrived and never wait on the network. With prefetch
 * depth P a session has up to P+1 batches fetching or decoding, so the
 * next batches' objects are in flight while this one decodes.
 *
 * An object already being fetched for another job (another session, or
 * the generation a StartEpoch replaced) is not requested again: the job
 * waits for that transfer and gets a copy of its bytes. Fetched objects
 * go into the node cache's encoded tier as they arrive.
 *
 * Loop thread only, except the requests' completions, which run on fetch's
 * I/O thread and hand a finished job back through a lock-free stack and
 * uv_async_send, as the worker pool does.
 */
#ifndef STOKER_PREFETCH_H
#define STOKER_PREFETCH_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "workers.h"

struct cache;
struct prefetch;

/* A job's fetches are all done (some may have failed: workers see each
 * sample's error); on the loop thread. */
typedef void (*prefetch_ready_fn)(struct batch_job *job, void *userdata);

int prefetch_new(uv_loop_t *loop, struct fetch *f, struct cache *cache, bool decoded_tier, prefetch_ready_fn ready,
		 void *userdata, struct prefetch **out);
/* Close the async handle (after prefetch_flush). Accepts NULL. */
void prefetch_free(struct prefetch *p);

/*
 * Fetch what job->fetches' samples lack. 0: nothing left to wait for
 * (queue the job now); 1: fetching, ready() follows. Errors only from
 * memory: the job can still be queued (a worker fetches what it lacks).
 */
int prefetch_start(struct prefetch *p, struct batch_job *job);
/* Free what the workers left of a finished job's fetched bytes. */
void prefetch_release(struct batch_job *job);
/* Hand over jobs whose fetches finished (at stop, after fetch_stop, with
 * the loop no longer running the async callback). */
void prefetch_flush(struct prefetch *p);

/* Remote samples found in the node cache, fetched, and served by a fetch
 * of the same object already in flight for another job, since start. */
void prefetch_counts(const struct prefetch *p, uint64_t *cache_hits, uint64_t *fetched, uint64_t *coalesced);

#endif
