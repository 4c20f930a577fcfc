/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "dataset.h"
#include "prefetch.h"

#define PREFETCH_BUCKETS 4096

struct prefetch {
	uv_async_t async;
	struct fetch *fetch;
	struct cache *cache;
	enum cache_tier tier; /* the tier workers read a sample from */
	prefetch_ready_fn ready;
	void *userdata;
	_Atomic(struct batch_job *) done_head;
	uint64_t cache_hits, fetched, coalesced; /* loop thread only */
	/* Objects in flight, by key, so two jobs (two sessions, or a
	 * generation and the one that replaced it) fetch an object once.
	 * Taken by the loop (look-up, insert) and the I/O thread (removal). */
	pthread_mutex_t lock;
	struct sample_fetch *inflight[PREFETCH_BUCKETS];
};

static bool same_key(const struct cache_key *a, const struct cache_key *b)
{
	return a->path_hash == b->path_hash && a->size == b->size && a->mtime_ns == b->mtime_ns;
}

/* On fetch's I/O thread: the job's last fetch hands the job back. */
static void job_fetch_done(struct batch_job *job, struct prefetch *p)
{
	struct batch_job *head;

	if (atomic_fetch_sub_explicit(&job->fetch_pending, 1, memory_order_acq_rel) != 1)
		return;
	head = atomic_load_explicit(&p->done_head, memory_order_relaxed);
	do
		job->fetch_next = head;
	while (!atomic_compare_exchange_weak_explicit(&p->done_head, &head, job, memory_order_release,
						      memory_order_relaxed));
	uv_async_send(&p->async);
}

/* On fetch's I/O thread: the object is here (or failed for good). */
static void sample_fetched(struct fetch_req *r)
{
	struct sample_fetch *sf = r->ctx, *followers, **pp;
	struct prefetch *p = sf->stage;

	/* Cached as it arrives (a job cancelled meanwhile still leaves it),
	 * and before it leaves the in-flight table, so a new job finds it in
	 * one or the other. */
	if (r->err == 0 && p->cache && p->tier == CACHE_ENCODED && dataset_key_matches(sf->job->ds, &sf->key, r->len))
		cache_put(p->cache, CACHE_ENCODED, &sf->key, r->data, r->len, NULL);
	pthread_mutex_lock(&p->lock);
	for (pp = &p->inflight[sf->key.path_hash % PREFETCH_BUCKETS]; *pp; pp = &(*pp)->hash_next) {
		if (*pp == sf) {
			*pp = sf->hash_next;
			break;
		}
	}
	followers = sf->followers;
	sf->followers = NULL;
	pthread_mutex_unlock(&p->lock);
	while (followers) {
		struct sample_fetch *f = followers;

		followers = f->follower_next;
		f->req.err = r->err;
		f->req.status = r->status;
		memcpy(f->req.message, r->message, sizeof(f->req.message));
		if (r->err == 0) {
			f->req.data = malloc(r->len ? r->len : 1);
			if (f->req.data) {
				memcpy(f->req.data, r->data, r->len);
				f->req.len = f->req.cap = r->len;
			} else {
				f->req.err = -ENOMEM;
			}
		}
		job_fetch_done(f->job, p);
	}
	job_fetch_done(sf->job, p);
}

void prefetch_flush(struct prefetch *p)
{
	struct batch_job *job, *rev = NULL;

	if (!p)
		return;
	job = atomic_exchange_explicit(&p->done_head, NULL, memory_order_acquire);
	/* Completion order, for fairness between sessions. */
	while (job) {
		struct batch_job *next = job->fetch_next;

		job->fetch_next = rev;
		rev = job;
		job = next;
	}
	while (rev) {
		struct batch_job *next = rev->fetch_next;

		rev->fetch_next = NULL;
		p->ready(rev, p->userdata);
		rev = next;
	}
}

static void on_async(uv_async_t *h)
{
	prefetch_flush(h->data);
}

int prefetch_new(uv_loop_t *loop, struct fetch *f, struct cache *cache, bool decoded_tier, prefetch_ready_fn ready,
		 void *userdata, struct prefetch **out)
{
	struct prefetch *p = calloc(1, sizeof(*p));
	int r;

	if (!p)
		return -ENOMEM;
	p->fetch = f;
	p->cache = cache;
	p->tier = decoded_tier ? CACHE_DECODED : CACHE_ENCODED;
	p->ready = ready;
	p->userdata = userdata;
	r = uv_async_init(loop, &p->async, on_async);
	if (r < 0) {
		free(p);
		return r;
	}
	p->async.data = p;
	pthread_mutex_init(&p->lock, NULL);
	*out = p;
	return 0;
}

static void on_closed(uv_handle_t *h)
{
	struct prefetch *p = h->data;

	pthread_mutex_destroy(&p->lock);
	free(p);
}

void prefetch_free(struct prefetch *p)
{
	if (p)
		uv_close((uv_handle_t *)&p->async, on_closed);
}

void prefetch_release(struct batch_job *job)
{
	for (uint32_t i = 0; job->fetches && i < job->count; i++) {
		struct sample_fetch *sf = &job->fetches[i];

		if (!sf->wanted)
			continue;
		free(sf->req.data);
		free(sf->url);
		sf->req.data = NULL;
		sf->url = NULL;
		sf->req.len = sf->req.cap = 0;
		sf->wanted = false;
	}
}

enum inflight_role {
	INFLIGHT_LEADER,   /* sf was entered: fetch it */
	INFLIGHT_FOLLOWER, /* sf follows the fetch of the same object in flight */
	INFLIGHT_CACHED,   /* the object arrived since prefetch_start looked: nothing to fetch */
};

/*
 * Join a fetch of the same object already in flight, or enter sf as the
 * object's leader. sample_fetched caches an object before it takes it out
 * of the table under the lock, so a look at the cache here, under the lock,
 * after the table has no such object, sees every object that left it: the
 * look prefetch_start made before taking the lock can miss one that
 * arrived in between, which would then be fetched twice.
 */
static enum inflight_role join_inflight(struct prefetch *p, struct sample_fetch *sf)
{
	struct sample_fetch **head = &p->inflight[sf->key.path_hash % PREFETCH_BUCKETS];
	enum inflight_role role = INFLIGHT_LEADER;

	pthread_mutex_lock(&p->lock);
	for (struct sample_fetch *l = *head; l; l = l->hash_next) {
		if (same_key(&l->key, &sf->key)) {
			sf->follower_next = l->followers;
			l->followers = sf;
			role = INFLIGHT_FOLLOWER;
			break;
		}
	}
	/* lock order (docs/threads.md): prefetch->lock, then a cache shard */
	if (role == INFLIGHT_LEADER && p->cache && p->tier == CACHE_ENCODED &&
	    cache_contains(p->cache, CACHE_ENCODED, &sf->key))
		role = INFLIGHT_CACHED;
	if (role == INFLIGHT_LEADER) {
		sf->hash_next = *head;
		*head = sf;
	}
	pthread_mutex_unlock(&p->lock);
	return role;
}

int prefetch_start(struct prefetch *p, struct batch_job *job)
{
	const struct dataset *ds = job->ds;
	uint32_t wanted = 0;
	char url[8192];
	int r = 0;

	for (uint32_t i = 0; i < job->count; i++) {
		struct sample_fetch *sf = &job->fetches[i];
		uint64_t index = job->order[i];

		sf->wanted = false;
		/* A file already known bad is replaced without a look. */
		if (dataset_is_bad(ds, index) || dataset_cache_key(ds, index, &sf->key) < 0)
			continue;
		if (p->cache && cache_contains(p->cache, p->tier, &sf->key)) {
			p->cache_hits++;
			continue;
		}
		memset(&sf->req, 0, sizeof(sf->req));
		dataset_range(ds, index, &sf->req.offset, &sf->req.length);
		/* An empty shard member has nothing to fetch (length 0 would be
		 * the whole shard); the worker's own read reports it, as it does
		 * a URL that cannot be made. */
		if ((ds->shards && sf->req.length == 0) || dataset_url(ds, index, url, sizeof(url)) < 0)
			continue;
		sf->job = job;
		sf->stage = p;
		sf->followers = sf->follower_next = sf->hash_next = NULL;
		sf->url = strdup(url);
		if (!sf->url) {
			r = -ENOMEM;
			break;
		}
		sf->req.url = sf->url;
		sf->req.auth = dataset_remote_auth(ds->remote);
		sf->req.done = sample_fetched;
		sf->req.ctx = sf;
		sf->wanted = true;
		wanted++;
	}
	if (wanted == 0)
		return r;
	/* One more than the samples, so none can finish the job before all
	 * are submitted. */
	atomic_store_explicit(&job->fetch_pending, wanted + 1, memory_order_relaxed);
	for (uint32_t i = 0; i < job->count; i++) {
		struct sample_fetch *sf = &job->fetches[i];

		if (!sf->wanted)
			continue;
		switch (join_inflight(p, sf)) {
		case INFLIGHT_FOLLOWER:
			sf->follower = true;
			p->coalesced++;
			continue;
		case INFLIGHT_CACHED:
			/* as the cache hit above: the worker reads it from the cache */
			sf->follower = false;
			sf->wanted = false;
			free(sf->url);
			sf->url = NULL;
			p->cache_hits++;
			atomic_fetch_sub_explicit(&job->fetch_pending, 1, memory_order_relaxed);
			continue;
		case INFLIGHT_LEADER: break;
		}
		sf->follower = false;
		p->fetched++;
		fetch_submit(p->fetch, &sf->req);
	}
	if (atomic_fetch_sub_explicit(&job->fetch_pending, 1, memory_order_acq_rel) == 1)
		return 0; /* all finished already */
	return 1;
}

void prefetch_counts(const struct prefetch *p, uint64_t *cache_hits, uint64_t *fetched, uint64_t *coalesced)
{
	*cache_hits = p->cache_hits;
	*fetched = p->fetched;
	*coalesced = p->coalesced;
}
