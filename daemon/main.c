/* SPDX-License-Identifier: MIT */
/*
 * stokerd: the node's data-feeding daemon. Reads the configuration layers,
 * starts the cache, the worker pool and the listening socket, then runs the
 * libuv loop until it is stopped (service.c: SIGTERM, SIGINT, a drain).
 */
#include <errno.h>
#include <limits.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cache.h"
#include "daemon.h"
#include "gpu.h"
#include "log.h"
#include "fetch.h"
#include "paths.h"
#include "prefetch.h"
#include "shards.h"
#include "workers.h"

/* Where tar shard indexes are kept: shard_index_dir, else the service's
 * cache directory (systemd's CacheDirectory=), else nowhere (rebuilt on
 * each open; data directories may be read-only, so never beside them). */
static void setup_shard_index_dir(const struct config *cfg)
{
	char dir[PATH_MAX];
	const char *cache = getenv("CACHE_DIRECTORY");

	if (cfg->shard_index_dir[0])
		snprintf(dir, sizeof(dir), "%s", cfg->shard_index_dir);
	else if (cache && cache[0] == '/')
		snprintf(dir, sizeof(dir), "%.*s/shards", (int)strcspn(cache, ":"), cache);
	else
		return;
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		log_warning("shard index directory %s: %s; tar shards are indexed on each open", dir, strerror(errno));
		return;
	}
	shards_set_index_dir(dir);
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: stokerd [OPTIONS]\n"
		   "Decode and augment JPEG data sets into shared-memory batches for the\n"
		   "trainer processes of this node.\n\n"
		   "  -s, --socket PATH       listen on PATH (default /run/stoker/stoker.sock)\n"
		   "  -w, --workers N         decode threads (default: the usable CPUs)\n"
		   "  -p, --prefetch N        batches kept ready ahead of each client (default 4)\n"
		   "  -c, --config FILE       read only FILE, not the layered files below\n"
		   "      --config-root DIR   look for the layered files under DIR (default /,\n"
		   "                          or $STOKER_CONFIG_ROOT)\n"
		   "  -o, --set KEY=VALUE     set any configuration key\n"
		   "  -l, --log-level LVL     err, warning, notice, info or debug (default info)\n"
		   "  -h, --help              show this help\n"
		   "  -V, --version           show the version\n\n"
		   "Settings, each layer overriding the one before: built-in defaults,\n"
		   "  " STOKER_VENDOR_CONFIG "\n"
		   "  " STOKER_ADMIN_CONFIG_DIR "/stoker.conf\n"
		   "  " STOKER_ADMIN_CONFIG_DIR "/stoker.conf.d/*.conf (in lexical order)\n"
		   "then flags. SIGHUP re-reads them; see stoker.conf(5) and stokerd(8).\n");
}

/* Record a flag's value for `key` (checked now, applied over the files). */
static int flag_value(struct config_state *cs, const char *key, const char *value, const char *flag)
{
	struct config scratch;
	int i = config_key_index(key), r;

	config_defaults(&scratch);
	r = config_set(&scratch, key, value);
	if (r < 0) {
		if (r == -ENOENT)
			fprintf(stderr, "stokerd: unknown setting '%s'\n", key);
		else
			fprintf(stderr, "stokerd: bad value '%s' for %s\n", value, flag);
		return r;
	}
	cs->cmdline[i] = value;
	return 0;
}

static int parse_args(int argc, char **argv, struct config_state *cs)
{
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'},
		{"workers", required_argument, NULL, 'w'},
		{"prefetch", required_argument, NULL, 'p'},
		{"config", required_argument, NULL, 'c'},
		{"set", required_argument, NULL, 'o'},
		{"log-level", required_argument, NULL, 'l'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{"config-root", required_argument, NULL, 'R'},
		{NULL, 0, NULL, 0},
	};
	char flag[64];
	char *eq;
	int c, r = 0;

	cs->root = getenv("STOKER_CONFIG_ROOT");
	while (r == 0 && (c = getopt_long(argc, argv, "s:w:p:c:o:l:hV", opts, NULL)) != -1) {
		switch (c) {
		case 's': r = flag_value(cs, "socket", optarg, "--socket"); break;
		case 'w': r = flag_value(cs, "workers", optarg, "--workers"); break;
		case 'p': r = flag_value(cs, "prefetch", optarg, "--prefetch"); break;
		case 'l': r = flag_value(cs, "log_level", optarg, "--log-level"); break;
		case 'c': cs->file = optarg; break;
		case 'R': cs->root = optarg; break;
		case 'o':
			eq = strchr(optarg, '=');
			if (!eq) {
				fprintf(stderr, "stokerd: --set wants KEY=VALUE, not '%s'\n", optarg);
				return -EINVAL;
			}
			*eq = '\0';
			snprintf(flag, sizeof(flag), "--set %s", optarg);
			r = flag_value(cs, optarg, eq + 1, flag);
			break;
		case 'h': usage(stdout); exit(EXIT_SUCCESS);
		case 'V': printf("stokerd %s\n", STOKER_VERSION); exit(EXIT_SUCCESS);
		default: usage(stderr); return -EINVAL;
		}
	}
	if (r < 0)
		return r;
	if (optind < argc) {
		fprintf(stderr, "stokerd: unexpected argument '%s'\n", argv[optind]);
		return -EINVAL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct daemon d = {.listen_fd = -1, .reserve_fd = -1};
	struct pool_settings ps;
	struct fetch_settings fs;
	char err[512];
	int r, status = 0;

	if (parse_args(argc, argv, &d.conf) < 0)
		return 2;
	r = service_load_config(&d, &d.conf.raw, &d.conf.origins, &d.conf.files, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "stokerd: %s\n", err);
		return 2;
	}
	d.cfg = d.conf.raw;
	config_resolve_memory(&d.cfg);
	log_setup(d.cfg.log_level);
	setup_shard_index_dir(&d.cfg);
	signal(SIGPIPE, SIG_IGN);
	if (d.cfg.cache_bytes > 0) {
		r = cache_new(d.cfg.cache_bytes, (enum cache_policy)d.cfg.cache_policy, &d.cache);
		if (r < 0) {
			log_error("cannot create the cache: %s", strerror(-r));
			return 1;
		}
	}

	d.loop = uv_default_loop();
	d.start_ns = monotonic_ns();
	ps = (struct pool_settings){
		.workers = d.cfg.workers ? d.cfg.workers : config_usable_cpus(),
		.queue_capacity = 1u << 20,
		.limits = {.max_pixels = d.cfg.max_image_pixels, .max_scans = d.cfg.max_scans},
		.max_file_bytes = d.cfg.max_file_bytes,
		.replace_attempts = d.cfg.replace_attempts,
		.cache = d.cache,
		.decoded_side = d.cfg.cache_decoded_side,
	};
	if (ps.workers > POOL_MAX_WORKERS)
		ps.workers = POOL_MAX_WORKERS;
	r = pool_new(d.loop, &ps, session_job_done, &d, &d.pool);
	if (r < 0) {
		log_error("cannot start %u workers: %s", ps.workers, strerror(-r));
		cache_free(d.cache);
		return 1;
	}
	fs = (struct fetch_settings){
		.max_inflight = d.cfg.fetch_max_inflight,
		.connect_timeout_ms = d.cfg.fetch_connect_timeout_ms,
		.stall_timeout_ms = d.cfg.fetch_stall_timeout_ms,
		.retries = d.cfg.fetch_retries,
		.backoff_ms = d.cfg.fetch_backoff_ms,
		.backoff_max_ms = 10000,
		.max_bytes = d.cfg.max_file_bytes,
	};
	r = fetch_new(&fs, &d.fetch);
	if (r == 0)
		r = prefetch_new(d.loop, d.fetch, d.cache, d.cfg.cache_decoded_side > 0, session_fetched, &d,
				 &d.prefetch);
	if (r < 0) {
		log_error("cannot start the HTTP/S3 I/O thread: %s", strerror(-r));
		fetch_free(d.fetch);
		pool_free(d.pool);
		uv_run(d.loop, UV_RUN_DEFAULT);
		cache_free(d.cache);
		return 1;
	}
	/* CUDA delivery: nothing loads until a client asks for a GPU. */
	r = gpu_new(d.loop, &d.gpu);
	if (r < 0)
		log_error("cannot set up GPU delivery: %s", strerror(-r));
	else
		r = server_listen(&d);
	if (r < 0) {
		gpu_free(d.gpu);
		fetch_stop(d.fetch);
		prefetch_flush(d.prefetch);
		prefetch_free(d.prefetch);
		pool_free(d.pool);
		uv_run(d.loop, UV_RUN_DEFAULT);
		fetch_free(d.fetch);
		cache_free(d.cache);
		return 1;
	}
	r = service_start(&d);
	if (r < 0) {
		service_stop(&d, "startup failed");
		status = 1;
	}

	uv_run(d.loop, UV_RUN_DEFAULT);

	datasets_free_all(&d);
	/* After the loop: scans on libuv's pool and workers may have used it. */
	fetch_free(d.fetch);
	cache_free(d.cache);
	for (size_t i = 0; i < CONFIG_MAX_KEYS; i++) {
		free(d.conf.runtime[i]);
		free(d.conf.pending[i]);
	}
	r = uv_loop_close(d.loop);
	if (r < 0)
		log_debug("loop closed with handles open: %s", uv_strerror(r));
	log_info("stopped");
	return status;
}
