/* SPDX-License-Identifier: MIT */
/*
 * Control: statistics for stokerctl and monitoring, and the control
 * requests (configuration, reload, drain, metrics). Rates come from samples
 * the stats timer takes every second over the last few seconds.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

#include "cache.h"
#include "daemon.h"
#include "gpu.h"
#include "ring.h"
#include "prefetch.h"
#include "rates.h"
#include "session.h"
#include "workers.h"

void control_sample(struct daemon *d)
{
	uint64_t now = monotonic_ns();

	if (!d->pool)
		return;
	d->window[d->window_next % STATS_WINDOW] = (struct stats_sample){
		.t_ns = now,
		.images = d->images_served,
		.busy_ns = pool_busy_ns(d->pool),
	};
	d->window_next++;
	for (struct conn *c = d->conns; c; c = c->next) {
		if (!c->session)
			continue;
		c->window[c->window_next % STATS_WINDOW] = (struct client_sample){
			.t_ns = now,
			.images = c->session->images,
			.wait_ns = c->session->wait_ns,
		};
		c->window_next++;
	}
}

static const struct stats_sample *window_oldest(const struct daemon *d)
{
	return d->window_next ? &d->window[rates_oldest(d->window_next, STATS_WINDOW)] : NULL;
}

void control_rates(const struct daemon *d, double *images_per_second, double *worker_busy)
{
	const struct stats_sample *old = window_oldest(d);
	uint64_t now = monotonic_ns();
	uint32_t workers = d->pool ? pool_workers(d->pool) : 0;

	*images_per_second = *worker_busy = 0.0;
	if (!old || !d->pool)
		return;
	*images_per_second = rates_per_second(old->t_ns, now, old->images, d->images_served);
	*worker_busy = rates_busy_share(old->t_ns, now, old->busy_ns, pool_busy_ns(d->pool), workers);
}

/* A client's images/s and stall (share of time in next()) lately. */
static void client_rates(const struct conn *c, double *ips, double *stall)
{
	const struct client_sample *old;
	const struct session *s = c->session;
	uint64_t now = monotonic_ns();

	*ips = *stall = 0.0;
	if (!c->window_next)
		return;
	old = &c->window[rates_oldest(c->window_next, STATS_WINDOW)];
	*ips = rates_per_second(old->t_ns, now, old->images, s->images);
	*stall = rates_busy_share(old->t_ns, now, old->wait_ns, s->wait_ns, 1);
}

uint32_t control_attached(const struct daemon *d)
{
	uint32_t n = 0;

	for (const struct conn *c = d->conns; c; c = c->next)
		if ((c->session || c->attaching) && !c->closing)
			n++;
	return n;
}

uint32_t control_inflight(const struct daemon *d)
{
	uint32_t n = 0;

	for (const struct conn *c = d->conns; c; c = c->next)
		if (c->session)
			n += c->session->inflight;
	return n;
}

uint64_t control_rss_bytes(void)
{
	unsigned long long size, resident;
	FILE *f = fopen("/proc/self/statm", "re");
	int n;

	if (!f)
		return 0;
	n = fscanf(f, "%llu %llu", &size, &resident);
	fclose(f);
	return n == 2 ? resident * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

void control_handle_stats(struct conn *c)
{
	struct daemon *d = c->d;
	Stoker__Message msg = STOKER__MESSAGE__INIT;
	Stoker__Stats st = STOKER__STATS__INIT;
	Stoker__ClientStats *cs = NULL, **csp = NULL;
	Stoker__CacheTierStats tiers[CACHE_TIERS], *tierp[CACHE_TIERS];
	uint64_t now = monotonic_ns();
	size_t n = 0;

	st.images_served = d->images_served;
	st.batches_served = d->batches_served;
	st.decode_errors = pool_decode_errors(d->pool);
	st.has_decode_error_files = true;
	st.decode_error_files = pool_decode_error_files(d->pool);
	st.workers = pool_workers(d->pool);
	control_rates(d, &st.images_per_second, &st.worker_busy);
	st.state = (char *)service_state(d);
	st.has_rss_bytes = st.has_connections = st.has_worker_threads = st.has_worker_busy_seconds = true;
	st.rss_bytes = control_rss_bytes();
	st.connections = d->nconns;
	st.worker_threads = pool_threads(d->pool);
	st.worker_busy_seconds = (double)pool_busy_ns(d->pool) / 1e9;
	st.has_worker_batch_op_seconds = true;
	st.worker_batch_op_seconds = (double)pool_batch_op_ns(d->pool) / 1e9;
	st.has_uptime_seconds = true;
	st.uptime_seconds = (double)(now - d->start_ns) / 1e9;
	st.has_protocol_errors = true;
	st.protocol_errors = d->protocol_errors;
	st.daemon_version = (char *)STOKER_VERSION;
	st.has_samples_decoded = st.has_samples_copied = true;
	st.samples_decoded = pool_samples_decoded(d->pool);
	st.samples_copied = pool_samples_copied(d->pool);
	st.has_label_errors = st.has_boxes_dropped = true;
	st.label_errors = d->label_errors;
	st.boxes_dropped = pool_boxes_dropped(d->pool);
	if (d->fetch && d->prefetch) {
		struct fetch_stats fs;

		fetch_get_stats(d->fetch, &fs);
		st.has_net_requests = st.has_net_bytes = st.has_net_retries = st.has_net_errors = true;
		st.has_remote_cache_hits = st.has_remote_fetched = st.has_net_inflight = true;
		st.net_requests = fs.requests;
		st.net_bytes = fs.bytes;
		st.net_retries = fs.retries;
		st.net_errors = fs.errors;
		st.net_inflight = (uint32_t)fs.inflight;
		st.has_remote_coalesced = true;
		prefetch_counts(d->prefetch, &st.remote_cache_hits, &st.remote_fetched, &st.remote_coalesced);
	}
	st.has_ring_bytes = st.has_memory_budget_bytes = true;
	st.ring_bytes = d->ring_bytes;
	st.memory_budget_bytes = d->cfg.memory_budget;
	st.has_device_bytes = st.has_gpu_memory_budget_bytes = true;
	st.device_bytes = d->device_bytes;
	st.gpu_memory_budget_bytes = d->cfg.gpu_memory_budget;
	st.cuda = (char *)gpu_status(d->gpu);
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
			cs[n].has_id = cs[n].has_uid = cs[n].has_ring_bytes = true;
			cs[n].id = it->id;
			cs[n].uid = (uint32_t)it->uid;
			cs[n].ring_bytes = s->ring->bytes;
			cs[n].has_decode_error_files = true;
			cs[n].decode_error_files = session_decode_error_files(s);
			cs[n].has_unreadable_samples = true;
			cs[n].unreadable_samples = s->unreadable;
			cs[n].device = s->device;
			cs[n].has_device_bytes = true;
			cs[n].device_bytes = s->device_bytes;
			cs[n].transforms = s->tpipe_text;
			cs[n].has_images_per_second = cs[n].has_stall = true;
			client_rates(it, &cs[n].images_per_second, &cs[n].stall);
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

/* ---- control requests ---- */

/* Requests that change the daemon: root, its own user, or admin_group. */
static bool require_admin(struct conn *c, const char *what)
{
	if (conn_is_admin(c))
		return true;
	conn_log_cred(LOG_LVL_WARNING, c, "%s denied: needs root or group %s", what,
		      c->d->cfg.admin_group[0] ? c->d->cfg.admin_group : "(admin_group unset)");
	conn_send_error(c, STOKER__ERROR_CODE__PERMISSION_DENIED, "%s needs root%s%s (you are uid %d)", what,
			c->d->cfg.admin_group[0] ? " or group " : "", c->d->cfg.admin_group, (int)c->uid);
	return false;
}

/* Key i as it stands, into e (texts in bufs, which must outlive e). */
static void config_entry(const struct daemon *d, size_t i, Stoker__ConfigEntry *e, char *value, char *effective,
			 size_t size)
{
	stoker__config_entry__init(e);
	config_format(&d->conf.raw, i, value, size);
	e->key = (char *)config_key_name(i);
	e->value = value;
	e->origin = (char *)d->conf.origins.key[i];
	e->live = config_key_live(i);
	if (service_effective(d, i, effective, size))
		e->effective = effective;
	e->pending = d->conf.pending[i];
}

void control_handle_config_get(struct conn *c)
{
	struct daemon *d = c->d;
	size_t n = config_key_count();
	Stoker__Message msg = STOKER__MESSAGE__INIT;
	Stoker__ConfigReply rep = STOKER__CONFIG_REPLY__INIT;
	Stoker__ConfigEntry *entries = calloc(n, sizeof(*entries));
	Stoker__ConfigEntry **ptrs = calloc(n, sizeof(*ptrs));
	char *texts = calloc(n, 2 * CONFIG_VALUE_MAX);
	char *files[CONFIG_MAX_FILES];

	if (!entries || !ptrs || !texts) {
		conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		config_entry(d, i, &entries[i], texts + 2 * i * CONFIG_VALUE_MAX,
			     texts + (2 * i + 1) * CONFIG_VALUE_MAX, CONFIG_VALUE_MAX);
		ptrs[i] = &entries[i];
	}
	for (size_t i = 0; i < d->conf.files.n; i++)
		files[i] = d->conf.files.path[i];
	rep.n_entries = n;
	rep.entries = ptrs;
	rep.n_files = d->conf.files.n;
	rep.files = files;
	msg.body_case = STOKER__MESSAGE__BODY_CONFIG_REPLY;
	msg.config_reply = &rep;
	conn_send(c, &msg, -1);
out:
	free(entries);
	free(ptrs);
	free(texts);
}

void control_handle_config_set(struct conn *c, const Stoker__ConfigSet *m)
{
	struct daemon *d = c->d;
	Stoker__Message msg = STOKER__MESSAGE__INIT;
	Stoker__ConfigSetReply rep = STOKER__CONFIG_SET_REPLY__INIT;
	Stoker__ConfigEntry entry;
	char err[512], value[CONFIG_VALUE_MAX], effective[CONFIG_VALUE_MAX];
	int r, i;

	if (!require_admin(c, "changing the configuration"))
		return;
	if (strlen(m->key) > STOKER__CONTROL_LIMITS__CONTROL_MAX_TEXT ||
	    strlen(m->value) > STOKER__CONTROL_LIMITS__CONTROL_MAX_TEXT) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "key or value longer than %d bytes",
				STOKER__CONTROL_LIMITS__CONTROL_MAX_TEXT);
		return;
	}
	r = service_set(d, m->key, m->value, err, sizeof(err));
	if (r < 0) {
		conn_log_cred(LOG_LVL_NOTICE, c, "set %s=%s refused: %s", m->key, m->value, err);
		conn_send_error(c,
				r == -ENOENT       ? STOKER__ERROR_CODE__NOT_FOUND
				: r == -EINVAL     ? STOKER__ERROR_CODE__INVALID_ARGUMENT
				: r == -EOPNOTSUPP ? STOKER__ERROR_CODE__RESTART_REQUIRED
						   : STOKER__ERROR_CODE__INTERNAL,
				"%s", err);
		return;
	}
	i = config_key_index(m->key);
	config_entry(d, (size_t)i, &entry, value, effective, sizeof(value));
	conn_log_cred(LOG_LVL_NOTICE, c, "set %s = %s", m->key, value);
	rep.entry = &entry;
	msg.body_case = STOKER__MESSAGE__BODY_CONFIG_SET_REPLY;
	msg.config_set_reply = &rep;
	conn_send(c, &msg, -1);
}

/* "a b c" -> the words, pointing into `list` (modified). */
static size_t split_words(char *list, char **words, size_t max)
{
	size_t n = 0;

	for (char *tok = strtok(list, " "); tok && n < max; tok = strtok(NULL, " "))
		words[n++] = tok;
	return n;
}

void control_handle_reload(struct conn *c)
{
	struct daemon *d = c->d;
	struct service_report sr;

	memset(&sr, 0, sizeof(sr));
	Stoker__Message msg = STOKER__MESSAGE__INIT;
	Stoker__ReloadReply rep = STOKER__RELOAD_REPLY__INIT;
	char err[512], *applied[CONFIG_MAX_KEYS], *restart[CONFIG_MAX_KEYS], *files[CONFIG_MAX_FILES];

	if (!require_admin(c, "reloading the configuration"))
		return;
	conn_log_cred(LOG_LVL_NOTICE, c, "reload");
	if (service_reload(d, &sr, err, sizeof(err)) < 0) {
		conn_send_error(c, STOKER__ERROR_CODE__INVALID_ARGUMENT, "%s", err);
		return;
	}
	rep.n_applied = split_words(sr.applied, applied, CONFIG_MAX_KEYS);
	rep.applied = applied;
	rep.n_restart_required = split_words(sr.restart, restart, CONFIG_MAX_KEYS);
	rep.restart_required = restart;
	for (size_t i = 0; i < d->conf.files.n; i++)
		files[i] = d->conf.files.path[i];
	rep.n_files = d->conf.files.n;
	rep.files = files;
	msg.body_case = STOKER__MESSAGE__BODY_RELOAD_REPLY;
	msg.reload_reply = &rep;
	conn_send(c, &msg, -1);
}

void control_handle_drain(struct conn *c, const Stoker__Drain *m)
{
	Stoker__Message msg = STOKER__MESSAGE__INIT;
	Stoker__DrainReply rep = STOKER__DRAIN_REPLY__INIT;

	if (!require_admin(c, "draining"))
		return;
	conn_log_cred(LOG_LVL_NOTICE, c, "drain (timeout %u s)", m->timeout_seconds);
	rep.clients = service_drain(c->d, m->timeout_seconds);
	msg.body_case = STOKER__MESSAGE__BODY_DRAIN_REPLY;
	msg.drain_reply = &rep;
	conn_send(c, &msg, -1);
}

void control_handle_metrics(struct conn *c)
{
	Stoker__Message msg = STOKER__MESSAGE__INIT;
	Stoker__Metrics rep = STOKER__METRICS__INIT;
	char *text = NULL;
	size_t len;

	if (metrics_render(c->d, &text, &len) < 0) {
		conn_send_error(c, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	rep.text = text;
	msg.body_case = STOKER__MESSAGE__BODY_METRICS;
	msg.metrics = &rep;
	conn_send(c, &msg, -1);
	free(text);
}
