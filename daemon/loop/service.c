/* SPDX-License-Identifier: MIT */
/*
 * The daemon as a node service: the configuration layers and live changes
 * (stokerctl set, SIGHUP), systemd readiness, status and watchdog, drain,
 * and the graceful stop. Loop thread only.
 *
 * Stop (SIGTERM, SIGINT, a finished drain): stop accepting, send Shutdown
 * to every client, schedule nothing new, let the jobs in the pool finish
 * and their batches go out (at most stop_timeout_ms), then close every
 * connection once its replies are flushed (at most SHUTDOWN_GRACE_MS more)
 * and exit 0. A second signal skips the wait for in-flight work.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <time.h>

#include "cache.h"
#include "daemon.h"
#include "fetch.h"
#include "gpu.h"
#include "log.h"
#include "prefetch.h"
#include "workers.h"

/* How long the stop waits for clients to take their last replies. */
#define SHUTDOWN_GRACE_MS 2000
#define STATS_PERIOD_MS 1000
/* STATUS= is refreshed every this many stats periods. */
#define STATUS_TICKS 5

const char *service_state(const struct daemon *d)
{
	return d->stopping ? "stopping" : d->draining ? "draining" : "serving";
}

/* ---- configuration ---- */

int service_load_config(struct daemon *d, struct config *raw, struct config_origins *o, struct config_files *files,
			char *errbuf, size_t errlen)
{
	const struct config_state *cs = &d->conf;
	const struct config_overrides ov = {.cmdline = cs->cmdline, .runtime = (const char *const *)cs->runtime};
	int r;

	r = config_load_all(raw, o, files, cs->root, cs->file, &ov, errbuf, errlen);
	if (r < 0)
		return r;
	return config_validate(raw, errbuf, errlen);
}

bool service_effective(const struct daemon *d, size_t i, char *buf, size_t size)
{
	char raw[CONFIG_VALUE_MAX];

	struct config eff = d->cfg;

	eff.cache_bytes_set = true; /* resolved: a size, not "auto" */
	if (strcmp(config_key_name(i), "workers") == 0 && d->pool)
		snprintf(buf, size, "%u", pool_workers(d->pool));
	else
		config_format(&eff, i, buf, size);
	config_format(&d->conf.raw, i, raw, sizeof(raw));
	return strcmp(raw, buf) != 0;
}

/* Can key i take `next`'s value without a restart? The cache can change
 * size while running, but not appear or go away. */
static bool live_now(const struct daemon *d, size_t i, const struct config *next)
{
	const char *name = config_key_name(i);
	struct config tmp;
	char text[CONFIG_VALUE_MAX];

	if (!config_key_live(i))
		return false;
	if (strcmp(name, "cache_bytes") != 0 && strcmp(name, "memory_budget") != 0)
		return true;
	tmp = d->conf.raw;
	config_format(next, i, text, sizeof(text));
	config_set(&tmp, name, text);
	config_resolve_memory(&tmp);
	return (d->cache != NULL) == (tmp.cache_bytes > 0);
}

static void report_add(char *list, size_t size, const char *key)
{
	size_t n = strlen(list);

	snprintf(list + n, size - n, "%s%s", n ? " " : "", key);
}

static void set_pending(struct daemon *d, size_t i, const char *value)
{
	char *copy = value ? strdup(value) : NULL;

	free(d->conf.pending[i]);
	d->conf.pending[i] = copy;
}

/*
 * Make `next` the configuration: live keys take effect, the others wait for
 * a restart (listed in rep). Side effects (threads, log level, cache
 * budget, metrics) follow the resolved values. `reload`: next is the whole
 * configuration re-read, so a restart key back at its running value is no
 * longer pending.
 */
static int apply_config(struct daemon *d, const struct config *next, const struct config_origins *next_o, bool reload,
			struct service_report *rep, char *errbuf, size_t errlen)
{
	struct config_state *cs = &d->conf;
	struct config raw = cs->raw, eff;
	uint32_t workers, old_workers = pool_workers(d->pool);
	int r;

	for (size_t i = 0; i < config_key_count(); i++) {
		char cur[CONFIG_VALUE_MAX], want[CONFIG_VALUE_MAX];

		config_format(&raw, i, cur, sizeof(cur));
		config_format(next, i, want, sizeof(want));
		if (strcmp(cur, want) == 0) {
			if (reload)
				set_pending(d, i, NULL);
			snprintf(cs->origins.key[i], CONFIG_ORIGIN_MAX, "%s", next_o->key[i]);
			continue;
		}
		if (!live_now(d, i, next)) {
			set_pending(d, i, want);
			report_add(rep->restart, sizeof(rep->restart), config_key_name(i));
			continue;
		}
		config_set(&raw, config_key_name(i), want);
		snprintf(cs->origins.key[i], CONFIG_ORIGIN_MAX, "%s", next_o->key[i]);
		set_pending(d, i, NULL);
		report_add(rep->applied, sizeof(rep->applied), config_key_name(i));
	}

	eff = raw;
	config_resolve_memory(&eff);
	workers = eff.workers ? eff.workers : config_usable_cpus();
	if (workers != old_workers) {
		r = pool_resize(d->pool, workers);
		if (r < 0) {
			snprintf(errbuf, errlen, "cannot run %u workers: %s", workers, strerror(-r));
			return r;
		}
		log_info("workers: %u -> %u", old_workers, workers);
	}
	if (eff.log_level != d->cfg.log_level)
		log_set_level(eff.log_level);
	if (d->cache && eff.cache_bytes != d->cfg.cache_bytes)
		cache_set_budget(d->cache, eff.cache_bytes);
	cs->raw = raw;
	d->cfg = eff;
	metrics_reconfigure(d);
	return 0;
}

int service_set(struct daemon *d, const char *key, const char *value, char *errbuf, size_t errlen)
{
	struct service_report rep = {.applied = "", .restart = ""};
	struct config next = d->conf.raw;
	struct config_origins o = d->conf.origins;
	char text[CONFIG_VALUE_MAX];
	int i = config_key_index(key), r;

	if (i < 0) {
		snprintf(errbuf, errlen, "unknown setting '%s'", key);
		return -ENOENT;
	}
	if (config_set(&next, key, value) < 0) {
		snprintf(errbuf, errlen, "bad value '%s' for %s (see stoker.conf(5))", value, key);
		return -EINVAL;
	}
	r = config_validate(&next, errbuf, errlen);
	if (r < 0)
		return r;
	if (!live_now(d, (size_t)i, &next)) {
		snprintf(errbuf, errlen,
			 "%s cannot change while stokerd runs: set it in a file under /etc/stoker/stoker.conf.d/ and "
			 "restart stokerd",
			 key);
		return -EOPNOTSUPP;
	}
	config_format(&next, (size_t)i, text, sizeof(text));
	snprintf(o.key[i], CONFIG_ORIGIN_MAX, "%s", CONFIG_ORIGIN_RUNTIME);
	r = apply_config(d, &next, &o, false, &rep, errbuf, errlen);
	if (r < 0)
		return r;
	free(d->conf.runtime[i]);
	d->conf.runtime[i] = strdup(text);
	if (!d->conf.runtime[i]) {
		snprintf(errbuf, errlen, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

static void notify_ready(struct daemon *d)
{
	double ips, busy;

	control_rates(d, &ips, &busy);
	sd_notifyf(0,
		   "READY=1\n"
		   "STATUS=Serving %u clients on %s: %.0f images/s, %u workers %.0f%% busy",
		   control_attached(d), d->listen_name, ips, pool_workers(d->pool), busy * 100.0);
}

int service_reload(struct daemon *d, struct service_report *rep, char *errbuf, size_t errlen)
{
	struct config next;
	struct config_origins o;
	struct config_files files;
	int r;

	sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=Reloading the configuration",
		   (unsigned long long)(monotonic_ns() / 1000));
	r = service_load_config(d, &next, &o, &files, errbuf, errlen);
	if (r == 0)
		r = apply_config(d, &next, &o, true, rep, errbuf, errlen);
	if (r < 0) {
		log_error("reload failed, the configuration is unchanged: %s", errbuf);
	} else {
		d->conf.files = files;
		log_notice("configuration reloaded from %zu file%s: %s%s%s%s", files.n, files.n == 1 ? "" : "s",
			   rep->applied[0] ? "applied " : "nothing changed", rep->applied,
			   rep->restart[0] ? "; waiting for a restart: " : "", rep->restart);
	}
	notify_ready(d);
	return r;
}

/* ---- timers and signals ---- */

static void on_stats_timer(uv_timer_t *t)
{
	struct daemon *d = t->data;

	control_sample(d);
	usermode_tick(d);
	if (++d->stats_ticks % STATUS_TICKS == 0 && !d->stopping) {
		double ips, busy;

		control_rates(d, &ips, &busy);
		sd_notifyf(0, "STATUS=%s %u clients: %.0f images/s, %u workers %.0f%% busy",
			   d->draining ? "Draining," : "Serving", control_attached(d), ips, pool_workers(d->pool),
			   busy * 100.0);
	}
}

/* Stopped-client leases and stuck closes; the period follows the lease, a
 * live setting. */
static void on_conn_timer(uv_timer_t *t)
{
	struct daemon *d = t->data;
	uint64_t period = server_housekeeping(d);

	if (uv_timer_get_repeat(t) != period) {
		uv_timer_stop(t);
		uv_timer_start(t, on_conn_timer, period, period);
	}
}

/* From the loop itself, so a wedged loop stops the pings. */
static void on_watchdog(uv_timer_t *t)
{
	sd_notify(0, "WATCHDOG=1");
}

static void on_signal(uv_signal_t *h, int signum)
{
	struct daemon *d = h->data;

	if (signum == SIGHUP) {
		struct service_report rep = {.applied = "", .restart = ""};
		char err[512];

		if (!d->stopping)
			service_reload(d, &rep, err, sizeof(err));
		return;
	}
	service_stop(d, strsignal(signum));
}

/* ---- drain and stop ---- */

static void on_shutdown_timer(uv_timer_t *t)
{
	struct daemon *d = t->data;

	log_warning("clients did not take their last replies in %d ms; closing them", SHUTDOWN_GRACE_MS);
	server_close_all(d, true);
	uv_close((uv_handle_t *)t, NULL);
}

/* In-flight work is done (or out of time): hang up and let the loop end. */
static void stop_finish(struct daemon *d)
{
	if (d->stopped)
		return;
	d->stopped = true;
	uv_check_stop(&d->life_check);
	uv_close((uv_handle_t *)&d->life_check, NULL);
	uv_close((uv_handle_t *)&d->stop_timer, NULL);
	uv_close((uv_handle_t *)&d->sig_term, NULL);
	uv_close((uv_handle_t *)&d->sig_int, NULL);
	uv_close((uv_handle_t *)&d->sig_hup, NULL);
	uv_close((uv_handle_t *)&d->stats_timer, NULL);
	uv_close((uv_handle_t *)&d->watchdog_timer, NULL);
	uv_close((uv_handle_t *)&d->conn_timer, NULL);
	metrics_stop(d);
	server_close_all(d, false);
	/* Transfers are cancelled; their jobs go to the pool (cancelled, so
	 * skipped) to complete as usual. Workers' own fetches fail at once. */
	fetch_stop(d->fetch);
	prefetch_flush(d->prefetch);
	prefetch_free(d->prefetch);
	d->prefetch = NULL;
	/* Sessions are detached and their jobs cancelled: draining is quick. */
	pool_free(d->pool);
	d->pool = NULL;
	gpu_free(d->gpu);
	d->gpu = NULL;
	if (d->conns) {
		uv_timer_start(&d->shutdown_timer, on_shutdown_timer, SHUTDOWN_GRACE_MS, 0);
		uv_unref((uv_handle_t *)&d->shutdown_timer);
	} else {
		uv_close((uv_handle_t *)&d->shutdown_timer, NULL);
	}
}

static void on_stop_timer(uv_timer_t *t)
{
	struct daemon *d = t->data;

	if (d->stopping) {
		log_warning("in-flight work did not finish in %u ms (stop_timeout_ms); cancelling it",
			    d->cfg.stop_timeout_ms);
		stop_finish(d);
	} else if (d->draining) {
		service_stop(d, "drain timeout");
	}
}

static void on_life_check(uv_check_t *h)
{
	struct daemon *d = h->data;

	if (d->stopping) {
		if (control_inflight(d) == 0)
			stop_finish(d);
	} else if (d->draining && control_attached(d) == 0) {
		service_stop(d, "drained: the last client left");
	}
}

void service_stop(struct daemon *d, const char *why)
{
	uint32_t inflight;

	if (d->stopped)
		return;
	if (d->stopping) {
		log_notice("stopping now (%s): not waiting for in-flight work", why);
		stop_finish(d);
		return;
	}
	d->stopping = true;
	snprintf(d->stop_reason, sizeof(d->stop_reason), "%s", why);
	inflight = control_inflight(d);
	log_info("stopping (%s): %u clients, %u batches in flight", why, control_attached(d), inflight);
	sd_notifyf(0, "STOPPING=1\nSTATUS=Stopping (%s): finishing %u batches in flight", why, inflight);
	server_stop_listening(d);
	server_announce_shutdown(d, why);
	uv_timer_stop(&d->stop_timer);
	uv_timer_start(&d->stop_timer, on_stop_timer, d->cfg.stop_timeout_ms, 0);
	uv_check_start(&d->life_check, on_life_check);
	on_life_check(&d->life_check);
}

uint32_t service_drain(struct daemon *d, uint32_t timeout_s)
{
	uint32_t n = control_attached(d);

	if (d->stopping)
		return n;
	if (!d->draining) {
		d->draining = true;
		server_stop_listening(d);
		log_notice("draining: accepting no new clients; stopping when the %u attached leave%s", n,
			   timeout_s ? "" : " (no time limit)");
		sd_notifyf(0, "STATUS=Draining: waiting for %u clients", n);
		uv_check_start(&d->life_check, on_life_check);
	}
	uv_timer_stop(&d->stop_timer);
	if (timeout_s)
		uv_timer_start(&d->stop_timer, on_stop_timer, (uint64_t)timeout_s * 1000, 0);
	/* The check runs after this loop turn: the reply goes out first. */
	return n;
}

int service_start(struct daemon *d)
{
	uint64_t usec = 0;
	int r;

	uv_signal_init(d->loop, &d->sig_term);
	uv_signal_init(d->loop, &d->sig_int);
	uv_signal_init(d->loop, &d->sig_hup);
	d->sig_term.data = d->sig_int.data = d->sig_hup.data = d;
	uv_signal_start(&d->sig_term, on_signal, SIGTERM);
	uv_signal_start(&d->sig_int, on_signal, SIGINT);
	uv_signal_start(&d->sig_hup, on_signal, SIGHUP);
	uv_timer_init(d->loop, &d->stats_timer);
	uv_timer_init(d->loop, &d->watchdog_timer);
	uv_timer_init(d->loop, &d->stop_timer);
	uv_timer_init(d->loop, &d->shutdown_timer);
	uv_timer_init(d->loop, &d->conn_timer);
	uv_check_init(d->loop, &d->life_check);
	d->stats_timer.data = d->watchdog_timer.data = d->stop_timer.data = d->shutdown_timer.data = d;
	d->conn_timer.data = d;
	d->life_check.data = d;
	control_sample(d);
	uv_timer_start(&d->stats_timer, on_stats_timer, STATS_PERIOD_MS, STATS_PERIOD_MS);
	uv_timer_start(&d->conn_timer, on_conn_timer, 100, 1000);

	/* WatchdogSec: ping twice per interval. */
	r = sd_watchdog_enabled(0, &usec);
	if (r > 0 && usec > 0) {
		uint64_t ms = usec / 2000 ? usec / 2000 : 1;

		uv_timer_start(&d->watchdog_timer, on_watchdog, ms, ms);
		log_info("watchdog: pinging every %llu ms", (unsigned long long)ms);
	}
	r = metrics_start(d);
	if (r < 0)
		return r;
	log_info("stokerd %s ready: %u workers, prefetch %u, memory budget %llu MiB (cache %llu MiB, %s)",
		 STOKER_VERSION, pool_workers(d->pool), d->cfg.prefetch,
		 (unsigned long long)(d->cfg.memory_budget >> 20), (unsigned long long)(d->cfg.cache_bytes >> 20),
		 d->cfg.cache_policy ? "lru" : "minio");
	notify_ready(d);
	return 0;
}
