/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "dataset.h"
#include "prefetch.h"

struct prefetch {
	uv_async_t async;
	struct fetch *fetch;
	struct cache *cache;
	enum cache_tier tier; /* the tier workers read a sample from */
	prefetch_ready_fn ready;
	void *userdata;
	_Atomic(struct batch_job *) done_head;
	uint64_t cache_hits, fetched; /* loop thread only */
};

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

static void sample_fetched(struct fetch_req *r)
{
	struct sample_fetch *sf = r->ctx;

	job_fetch_done(sf->job, sf->stage);
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
	*out = p;
	return 0;
}

static void on_closed(uv_handle_t *h)
{
	free(h->data);
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

int prefetch_start(struct prefetch *p, struct batch_job *job)
{
	const struct dataset *ds = job->ds;
	uint32_t wanted = 0;
	char url[8192];
	int r = 0;

	for (uint32_t i = 0; i < job->count; i++) {
		struct sample_fetch *sf = &job->fetches[i];
		uint64_t index = job->order[i];
		struct cache_key key;

		sf->wanted = false;
		/* A file already known bad is replaced without a look. */
		if (dataset_is_bad(ds, index))
			continue;
		if (p->cache && dataset_cache_key(ds, index, &key) == 0 && cache_contains(p->cache, p->tier, &key)) {
			p->cache_hits++;
			continue;
		}
		if (dataset_url(ds, index, url, sizeof(url)) < 0)
			continue; /* the worker's own read reports it */
		sf->url = strdup(url);
		if (!sf->url) {
			r = -ENOMEM;
			break;
		}
		memset(&sf->req, 0, sizeof(sf->req));
		sf->req.url = sf->url;
		sf->req.auth = ds->remote->is_signed ? &ds->remote->auth : NULL;
		sf->req.done = sample_fetched;
		sf->req.ctx = sf;
		sf->job = job;
		sf->stage = p;
		sf->wanted = true;
		wanted++;
	}
	if (wanted == 0)
		return r;
	p->fetched += wanted;
	/* One more than the requests, so none can finish the job before all
	 * are submitted. */
	atomic_store_explicit(&job->fetch_pending, wanted + 1, memory_order_relaxed);
	for (uint32_t i = 0; i < job->count; i++)
		if (job->fetches[i].wanted)
			fetch_submit(p->fetch, &job->fetches[i].req);
	if (atomic_fetch_sub_explicit(&job->fetch_pending, 1, memory_order_acq_rel) == 1)
		return 0; /* all finished already */
	return 1;
}

void prefetch_counts(const struct prefetch *p, uint64_t *cache_hits, uint64_t *fetched)
{
	*cache_hits = p->cache_hits;
	*fetched = p->fetched;
}
