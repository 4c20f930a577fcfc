/* SPDX-License-Identifier: MIT */
/*
 * Control: statistics for stokerctl and monitoring. Rates come from samples
 * the stats timer takes every second over the last few seconds.
 */
#include <stdlib.h>

#include "cache.h"
#include "daemon.h"
#include "session.h"
#include "workers.h"

void control_sample(struct daemon *d)
{
	d->window[d->window_next % STATS_WINDOW] = (struct stats_sample){
		.t_ns = daemon_now_ns(),
		.images = d->images_served,
		.busy_ns = pool_busy_ns(d->pool),
	};
	d->window_next++;
}

/* The oldest sample still in the window. */
static const struct stats_sample *window_oldest(const struct daemon *d)
{
	if (d->window_next == 0)
		return NULL;
	if (d->window_next < STATS_WINDOW)
		return &d->window[0];
	return &d->window[d->window_next % STATS_WINDOW];
}

void control_handle_stats(struct conn *c)
{
	struct daemon *d = c->d;
	Stoker__Message msg = STOKER__MESSAGE__INIT;
	Stoker__Stats st = STOKER__STATS__INIT;
	Stoker__ClientStats *cs = NULL, **csp = NULL;
	Stoker__CacheTierStats tiers[CACHE_TIERS], *tierp[CACHE_TIERS];
	const struct stats_sample *old = window_oldest(d);
	uint64_t now = daemon_now_ns(), busy = pool_busy_ns(d->pool);
	size_t n = 0;

	st.images_served = d->images_served;
	st.batches_served = d->batches_served;
	st.decode_errors = pool_decode_errors(d->pool);
	st.workers = pool_workers(d->pool);
	if (old && now > old->t_ns) {
		double dt = (double)(now - old->t_ns) / 1e9;
		st.images_per_second = (double)(d->images_served - old->images) / dt;
		st.worker_busy = (double)(busy - old->busy_ns) / 1e9 / dt / (st.workers ? st.workers : 1);
		if (st.worker_busy > 1.0)
			st.worker_busy = 1.0;
	}
	st.has_uptime_seconds = true;
	st.uptime_seconds = (double)(now - d->start_ns) / 1e9;
	st.has_protocol_errors = true;
	st.protocol_errors = d->protocol_errors;
	st.daemon_version = (char *)STOKER_VERSION;
	st.has_samples_decoded = st.has_samples_copied = true;
	st.samples_decoded = pool_samples_decoded(d->pool);
	st.samples_copied = pool_samples_copied(d->pool);
	st.has_ring_bytes = st.has_memory_budget_bytes = true;
	st.ring_bytes = d->ring_bytes;
	st.memory_budget_bytes = d->cfg.memory_budget;
	if (d->cache) {
		static const char *const names[CACHE_TIERS] = {"encoded", "decoded"};

		st.cache_policy = (char *)(cache_policy(d->cache) == CACHE_LRU ? "lru" : "minio");
		st.has_cache_budget_bytes = st.has_cache_bytes = true;
		st.cache_budget_bytes = cache_budget(d->cache);
		st.cache_bytes = cache_bytes(d->cache);
		for (int t = 0; t < CACHE_TIERS; t++) {
			struct cache_tier_stats ts;

			cache_stats(d->cache, (enum cache_tier)t, &ts);
			stoker__cache_tier_stats__init(&tiers[t]);
			tiers[t].tier = (char *)names[t];
			tiers[t].hits = ts.hits;
			tiers[t].misses = ts.misses;
			tiers[t].entries = ts.entries;
			tiers[t].bytes = ts.bytes;
			tiers[t].evictions = ts.evictions;
			tiers[t].rejected = ts.rejected;
			tierp[t] = &tiers[t];
		}
		st.n_cache = CACHE_TIERS;
		st.cache = tierp;
	}

	for (struct conn *it = d->conns; it; it = it->next)
		if (it->session)
			n++;
	if (n) {
		cs = calloc(n, sizeof(*cs));
		csp = calloc(n, sizeof(*csp));
		if (!cs || !csp) {
			free(cs);
			free(csp);
			conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED, "out of memory");
			return;
		}
		n = 0;
		for (struct conn *it = d->conns; it; it = it->next) {
			struct session *s = it->session;

			if (!s)
				continue;
			stoker__client_stats__init(&cs[n]);
			cs[n].pid = (uint32_t)it->pid;
			cs[n].rank = s->plan.rank;
			cs[n].world_size = s->plan.world_size;
			cs[n].batches = s->batches;
			cs[n].images = s->images;
			cs[n].wait_seconds = (double)s->wait_ns / 1e9;
			cs[n].dataset = s->dataset_name;
			cs[n].has_epoch = true;
			cs[n].epoch = s->epoch;
			csp[n] = &cs[n];
			n++;
		}
	}
	st.n_clients = n;
	st.clients = csp;
	msg.body_case = STOKER__MESSAGE__BODY_STATS;
	msg.stats = &st;
	conn_send(c, &msg, -1);
	free(cs);
	free(csp);
}
