/* SPDX-License-Identifier: MIT */
/*
 * stokerd: the node's data-feeding daemon. Sets up the configuration, the
 * worker pool and the listening socket, then runs the libuv loop until
 * SIGTERM or SIGINT.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "cache.h"
#include "daemon.h"
#include "log.h"
#include "workers.h"

/* How long shutdown waits for clients to take their last replies. */
#define SHUTDOWN_GRACE_MS 2000
#define STATS_PERIOD_MS 1000

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: stokerd [OPTIONS]\n"
		"Decode and augment JPEG data sets into shared-memory batches for the\n"
		"trainer processes of this node.\n\n"
		"  -s, --socket PATH     listen on PATH (default /run/stoker/stoker.sock)\n"
		"  -w, --workers N       decode threads (default: the usable CPUs)\n"
		"  -p, --prefetch N      batches kept ready ahead of each client (default 4)\n"
		"  -c, --config FILE     read settings from an INI file (see stoker.conf)\n"
		"  -o, --set KEY=VALUE   set any configuration key\n"
		"  -l, --log-level LVL   err, warning, notice, info or debug (default info)\n"
		"  -h, --help            show this help\n"
		"  -V, --version         show the version\n");
}

static void on_stats_timer(uv_timer_t *t)
{
	control_sample(t->data);
}

static void on_shutdown_timer(uv_timer_t *t)
{
	struct daemon *d = t->data;

	log_warning("clients did not take their last replies in %d ms; closing them", SHUTDOWN_GRACE_MS);
	server_close_all(d, true);
	uv_close((uv_handle_t *)t, NULL);
}

static void daemon_stop(struct daemon *d, const char *why)
{
	if (d->stopping)
		return;
	d->stopping = true;
	log_info("stopping: %s", why);
	sd_notify(0, "STOPPING=1\nSTATUS=Stopping");
	server_stop_listening(d);
	server_close_all(d, false);
	uv_close((uv_handle_t *)&d->sig_term, NULL);
	uv_close((uv_handle_t *)&d->sig_int, NULL);
	uv_close((uv_handle_t *)&d->stats_timer, NULL);
	/* Sessions are detached and their jobs cancelled: draining is quick. */
	pool_free(d->pool);
	d->pool = NULL;
	if (d->conns) {
		uv_timer_start(&d->shutdown_timer, on_shutdown_timer, SHUTDOWN_GRACE_MS, 0);
		uv_unref((uv_handle_t *)&d->shutdown_timer);
	} else {
		uv_close((uv_handle_t *)&d->shutdown_timer, NULL);
	}
}

static void on_signal(uv_signal_t *h, int signum)
{
	daemon_stop(h->data, strsignal(signum));
}

static int parse_args(int argc, char **argv, struct config *cfg)
{
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'},   {"workers", required_argument, NULL, 'w'},
		{"prefetch", required_argument, NULL, 'p'}, {"config", required_argument, NULL, 'c'},
		{"set", required_argument, NULL, 'o'},      {"log-level", required_argument, NULL, 'l'},
		{"help", no_argument, NULL, 'h'},           {"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	/* Flags override the file whatever their order: read it first. */
	const char *config_path = NULL;
	int c, r, line = 0;

	while ((c = getopt_long(argc, argv, "s:w:p:c:o:l:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config_path = optarg;
			break;
		case 'h':
			usage(stdout);
			exit(EXIT_SUCCESS);
		case 'V':
			printf("stokerd %s\n", STOKER_VERSION);
			exit(EXIT_SUCCESS);
		case '?':
			usage(stderr);
			return -EINVAL;
		default:
			break;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "stokerd: unexpected argument '%s'\n", argv[optind]);
		return -EINVAL;
	}
	if (config_path) {
		r = config_load(cfg, config_path, &line);
		if (r < 0) {
			if (line > 0)
				fprintf(stderr, "stokerd: %s:%d: bad or unknown setting\n", config_path, line);
			else
				fprintf(stderr, "stokerd: %s: %s\n", config_path, strerror(-r));
			return r;
		}
	}
	optind = 1;
	while ((c = getopt_long(argc, argv, "s:w:p:c:o:l:hV", opts, NULL)) != -1) {
		const char *key = NULL;
		char *eq;

		switch (c) {
		case 's': key = "socket"; break;
		case 'w': key = "workers"; break;
		case 'p': key = "prefetch"; break;
		case 'l': key = "log_level"; break;
		case 'o':
			eq = strchr(optarg, '=');
			if (!eq) {
				fprintf(stderr, "stokerd: --set wants KEY=VALUE, not '%s'\n", optarg);
				return -EINVAL;
			}
			*eq = '\0';
			r = config_set(cfg, optarg, eq + 1);
			if (r < 0) {
				fprintf(stderr, "stokerd: %s '%s'\n", r == -ENOENT ? "unknown setting" : "bad value for",
					optarg);
				return r;
			}
			continue;
		default:
			continue;
		}
		r = config_set(cfg, key, optarg);
		if (r < 0) {
			fprintf(stderr, "stokerd: bad value '%s' for --%s\n", optarg, key);
			return r;
		}
	}
	if (cfg->prefetch > cfg->max_prefetch) {
		fprintf(stderr, "stokerd: prefetch %u is over max_prefetch %u\n", cfg->prefetch, cfg->max_prefetch);
		return -EINVAL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct daemon d = {.listen_fd = -1};
	struct pool_settings ps;
	int r;

	config_defaults(&d.cfg);
	if (parse_args(argc, argv, &d.cfg) < 0)
		return 2;
	log_setup(d.cfg.log_level);
	signal(SIGPIPE, SIG_IGN);
	config_resolve_memory(&d.cfg);
	if (d.cfg.cache_bytes > 0) {
		r = cache_new(d.cfg.cache_bytes, (enum cache_policy)d.cfg.cache_policy, &d.cache);
		if (r < 0) {
			log_error("cannot create the cache: %s", strerror(-r));
			return 1;
		}
	}

	d.loop = uv_default_loop();
	d.start_ns = daemon_now_ns();
	ps = (struct pool_settings){
		.workers = d.cfg.workers ? d.cfg.workers : config_usable_cpus(),
		.queue_capacity = 1u << 20,
		.limits = {.max_pixels = d.cfg.max_image_pixels, .max_scans = d.cfg.max_scans},
		.max_file_bytes = d.cfg.max_file_bytes,
		.replace_attempts = d.cfg.replace_attempts,
		.cache = d.cache,
		.decoded_side = d.cfg.cache_decoded_side,
	};
	r = pool_new(d.loop, &ps, session_job_done, &d, &d.pool);
	if (r < 0) {
		log_error("cannot start %u workers: %s", ps.workers, strerror(-r));
		return 1;
	}
	r = server_listen(&d);
	if (r < 0) {
		pool_free(d.pool);
		uv_run(d.loop, UV_RUN_DEFAULT);
		return 1;
	}
	uv_signal_init(d.loop, &d.sig_term);
	uv_signal_init(d.loop, &d.sig_int);
	d.sig_term.data = d.sig_int.data = &d;
	uv_signal_start(&d.sig_term, on_signal, SIGTERM);
	uv_signal_start(&d.sig_int, on_signal, SIGINT);
	uv_timer_init(d.loop, &d.stats_timer);
	uv_timer_init(d.loop, &d.shutdown_timer);
	d.stats_timer.data = d.shutdown_timer.data = &d;
	control_sample(&d);
	uv_timer_start(&d.stats_timer, on_stats_timer, STATS_PERIOD_MS, STATS_PERIOD_MS);

	log_info("stokerd %s ready: %u workers, prefetch %u, memory budget %llu MiB (cache %llu MiB, %s)", STOKER_VERSION,
		 pool_workers(d.pool), d.cfg.prefetch, (unsigned long long)(d.cfg.memory_budget >> 20),
		 (unsigned long long)(d.cfg.cache_bytes >> 20), d.cfg.cache_policy ? "lru" : "minio");
	sd_notifyf(0, "READY=1\nSTATUS=Serving on %s with %u workers", d.cfg.socket_path, pool_workers(d.pool));

	uv_run(d.loop, UV_RUN_DEFAULT);

	free(d.datasets);
	cache_free(d.cache);
	r = uv_loop_close(d.loop);
	if (r < 0)
		log_debug("loop closed with handles open: %s", uv_strerror(r));
	log_info("stopped");
	return 0;
}
