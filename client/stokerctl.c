/* SPDX-License-Identifier: MIT */
/* stokerctl: watch and steer a running stokerd. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "stoker.h"

/* Exit statuses: 0 done, 1 failed, 2 usage, 3 the setting needs a restart. */
#define EXIT_USAGE 2
#define EXIT_RESTART 3

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: stokerctl [--socket PATH] COMMAND [ARGS]\n\n"
		"Commands:\n"
		"  stats [--json]            throughput, errors, workers and attached clients\n"
		"  top [-n N] [-d SECONDS]   a live view, refreshed every second: per client\n"
		"                            images/s and stall, workers, cache, memory\n"
		"  metrics                   Prometheus text exposition\n"
		"  config [--json]           the merged configuration, each key's origin\n"
		"  set KEY=VALUE...          change settings now, until the next restart\n"
		"  reload                    re-read the configuration files (as SIGHUP)\n"
		"  drain [--timeout S]       take no new clients; stokerd exits once the\n"
		"                            attached ones have left (or after S seconds)\n\n"
		"  -s, --socket PATH  the daemon's socket (default $STOKER_SOCKET, else %s,\n"
		"                     else this user's user-mode daemon's)\n"
		"  -h, --help         show this help\n"
		"  -V, --version      show the version\n\n"
		"set, reload and drain need root, stokerd's user or its admin_group.\n"
		"Exit status: 0 done, 1 failed, 2 usage, 3 a setting needs a restart.\n",
		STOKER_DEFAULT_SOCKET);
}

struct ctl {
	struct stoker *s;
	const char *command;
	bool json;
	long iterations; /* top: 0 = until interrupted */
	double delay;    /* top: seconds between refreshes */
	unsigned long timeout;
};

static int fail(struct ctl *c, const char *what, int r)
{
	const char *why = stoker_last_error(c->s);

	/* The daemon's message says more than the errno. */
	fprintf(stderr, "stokerctl: %s: %s\n", what, *why ? why : strerror(-r));
	return r == -EOPNOTSUPP ? EXIT_RESTART : EXIT_FAILURE;
}

/* A command that prints what the library returns. */
static int print_text(struct ctl *c, const char *what, int (*fetch)(struct stoker *, char **))
{
	char *out = NULL;
	int r = fetch(c->s, &out);

	if (r < 0)
		return fail(c, what, r);
	fputs(out, stdout);
	free(out);
	return 0;
}

static int cmd_set(struct ctl *c, int argc, char **argv)
{
	if (argc == 0) {
		fprintf(stderr, "stokerctl: set wants KEY=VALUE\n");
		return EXIT_USAGE;
	}
	for (int i = 0; i < argc; i++) {
		char *eq = strchr(argv[i], '=');
		int r;

		if (!eq || eq == argv[i]) {
			fprintf(stderr, "stokerctl: set wants KEY=VALUE, not '%s'\n", argv[i]);
			return EXIT_USAGE;
		}
		*eq = '\0';
		r = stoker_config_set(c->s, argv[i], eq + 1);
		if (r < 0) {
			char what[256];

			snprintf(what, sizeof(what), "set %s=%s", argv[i], eq + 1);
			return fail(c, what, r);
		}
		printf("%s = %s\n", argv[i], eq + 1);
	}
	return 0;
}

static int cmd_drain(struct ctl *c)
{
	uint32_t clients = 0;
	int r;

	if (c->timeout > UINT32_MAX) {
		fprintf(stderr, "stokerctl: --timeout is too large\n");
		return EXIT_USAGE;
	}
	r = stoker_drain(c->s, (uint32_t)c->timeout, &clients);
	if (r < 0)
		return fail(c, "drain", r);
	printf("draining: stokerd takes no new clients and exits once the %u attached have left", clients);
	if (c->timeout)
		printf(" (at most %lu s)", c->timeout);
	printf("\n");
	return 0;
}

/* ---- top ---- */

static double num(const struct stoker_stats *st, const char *name)
{
	double v = 0;

	stoker_stats_number(st, name, &v);
	return v;
}

static double item(const struct stoker_stats *st, const char *list, size_t i, const char *name)
{
	double v = 0;

	stoker_stats_item_number(st, list, i, name, &v);
	return v;
}

static const char *human_bytes(double v, char *buf, size_t size)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int u = 0;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", v, units[u]);
	return buf;
}

static const char *human_duration(double s, char *buf, size_t size)
{
	unsigned long t = (unsigned long)s;

	if (t >= 86400)
		snprintf(buf, size, "%lud%02luh", t / 86400, t % 86400 / 3600);
	else if (t >= 3600)
		snprintf(buf, size, "%luh%02lum", t / 3600, t % 3600 / 60);
	else
		snprintf(buf, size, "%lum%02lus", t / 60, t % 60);
	return buf;
}

/* Cache look-ups at the previous refresh, for hit rates "now". */
struct tier_prev {
	char name[16];
	double hits, misses;
	bool seen;
};

static void top_cache(const struct stoker_stats *st, struct tier_prev *prev, size_t nprev)
{
	const char *policy = stoker_stats_string(st, "cache_policy");
	size_t n = stoker_stats_count(st, "cache");
	char a[32], b[32];

	if (!policy) {
		printf("cache     none\n");
		return;
	}
	printf("cache     %s, %s of %s", policy, human_bytes(num(st, "cache_bytes"), a, sizeof(a)),
	       human_bytes(num(st, "cache_budget_bytes"), b, sizeof(b)));
	for (size_t i = 0; i < n && i < nprev; i++) {
		const char *tier = stoker_stats_item_string(st, "cache", i, "tier");
		double hits = item(st, "cache", i, "hits"), misses = item(st, "cache", i, "misses");
		double dh = hits - prev[i].hits, dm = misses - prev[i].misses;

		if (!prev[i].seen || strcmp(prev[i].name, tier ? tier : "") != 0) {
			dh = hits;
			dm = misses;
		}
		if (dh + dm > 0)
			printf("   %s %.1f%% hits", tier ? tier : "?", 100.0 * dh / (dh + dm));
		else
			printf("   %s idle", tier ? tier : "?");
		snprintf(prev[i].name, sizeof(prev[i].name), "%s", tier ? tier : "");
		prev[i].hits = hits;
		prev[i].misses = misses;
		prev[i].seen = true;
	}
	printf("\n");
}

static int by_id(const void *a, const void *b, void *arg)
{
	const struct stoker_stats *st = arg;
	double x = item(st, "clients", *(const size_t *)a, "id"), y = item(st, "clients", *(const size_t *)b, "id");

	return (x > y) - (x < y);
}

static void top_frame(const struct stoker_stats *st, struct tier_prev *prev, size_t nprev)
{
	const char *state = stoker_stats_string(st, "state"), *version = stoker_stats_string(st, "daemon_version");
	size_t n = stoker_stats_count(st, "clients"), *order = calloc(n ? n : 1, sizeof(*order));
	char a[32], b[32], c[32];

	printf("stokerd %s, up %s, %s: %zu clients, %.0f connections\n", version ? version : "?",
	       human_duration(num(st, "uptime_seconds"), a, sizeof(a)), state ? state : "serving", n,
	       num(st, "connections"));
	printf("served    %.1f images/s   %.0f images   %.0f decode errors (%.0f bad files)\n",
	       num(st, "images_per_second"), num(st, "images_served"), num(st, "decode_errors"),
	       num(st, "decode_error_files"));
	printf("workers   %.0f, %.0f%% busy", num(st, "workers"), 100.0 * num(st, "worker_busy"));
	if (num(st, "worker_threads") > num(st, "workers"))
		printf(" (%.0f threads until the surplus leaves)", num(st, "worker_threads"));
	printf("\nmemory    rss %s   rings %s   budget %s\n", human_bytes(num(st, "rss_bytes"), a, sizeof(a)),
	       human_bytes(num(st, "ring_bytes"), b, sizeof(b)),
	       human_bytes(num(st, "memory_budget_bytes"), c, sizeof(c)));
	if (num(st, "device_bytes") > 0 || num(st, "gpu_memory_budget_bytes") > 0)
		printf("gpu       device rings %s   budget %s per GPU\n",
		       human_bytes(num(st, "device_bytes"), a, sizeof(a)),
		       num(st, "gpu_memory_budget_bytes") > 0
			       ? human_bytes(num(st, "gpu_memory_budget_bytes"), b, sizeof(b))
			       : "free memory");
	top_cache(st, prev, nprev);
	if (num(st, "net_requests") > 0 || num(st, "remote_cache_hits") > 0) {
		double fetched = num(st, "remote_fetched"), hits = num(st, "remote_cache_hits");

		/* Remote samples: warm ones came from the node cache. */
		printf("network   %.0f requests   %s   %.0f retries   %.0f errors   %.0f in flight   remote samples "
		       "%.1f%% from the cache\n",
		       num(st, "net_requests"), human_bytes(num(st, "net_bytes"), a, sizeof(a)), num(st, "net_retries"),
		       num(st, "net_errors"), num(st, "net_inflight"),
		       fetched + hits > 0 ? 100.0 * hits / (fetched + hits) : 0.0);
	}
	printf("\n%7s %8s %9s %6s %9s %10s %7s %10s %8s %10s  %s\n", "CLIENT", "PID", "RANK", "EPOCH", "BATCHES",
	       "IMAGES/S", "STALL", "RING", "DEVICE", "GPU MEM", "DATASET");
	if (!order)
		return;
	for (size_t i = 0; i < n; i++)
		order[i] = i;
	qsort_r(order, n, sizeof(*order), by_id, (void *)st);
	for (size_t k = 0; k < n; k++) {
		size_t i = order[k];
		const char *ds = stoker_stats_item_string(st, "clients", i, "dataset");
		const char *dev = stoker_stats_item_string(st, "clients", i, "device"), *tf;
		char rank[24];

		snprintf(rank, sizeof(rank), "%.0f/%.0f", item(st, "clients", i, "rank"),
			 item(st, "clients", i, "world_size"));
		printf("%7.0f %8.0f %9s %6.0f %9.0f %10.1f %6.1f%% %10s %8s %10s  %s\n", item(st, "clients", i, "id"),
		       item(st, "clients", i, "pid"), rank, item(st, "clients", i, "epoch"),
		       item(st, "clients", i, "batches"), item(st, "clients", i, "images_per_second"),
		       100.0 * item(st, "clients", i, "stall"),
		       human_bytes(item(st, "clients", i, "ring_bytes"), a, sizeof(a)), dev ? dev : "cpu",
		       human_bytes(item(st, "clients", i, "device_bytes"), b, sizeof(b)), ds ? ds : "");
		tf = stoker_stats_item_string(st, "clients", i, "transforms");
		if (tf && *tf)
			printf("%7s transforms: %s\n", "", tf);
	}
	free(order);
}

static int cmd_top(struct ctl *c)
{
	struct tier_prev prev[8];
	bool tty = isatty(STDOUT_FILENO);

	memset(prev, 0, sizeof(prev));

	for (long i = 0; c->iterations <= 0 || i < c->iterations; i++) {
		struct stoker_stats *st;
		int r;

		if (i > 0) {
			struct timespec ts = {.tv_sec = (time_t)c->delay,
					      .tv_nsec = (long)((c->delay - (double)(time_t)c->delay) * 1e9)};

			while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
				;
		}
		r = stoker_stats_get(c->s, &st);
		if (r < 0)
			return fail(c, "top", r);
		/* On a terminal, redraw in place; in a pipe, one frame after
		 * another. */
		fputs(tty ? "\033[H\033[2J" : (i ? "\n" : ""), stdout);
		top_frame(st, prev, sizeof(prev) / sizeof(prev[0]));
		fflush(stdout);
		stoker_stats_free(st);
	}
	return 0;
}

static int run(struct ctl *c, int argc, char **argv)
{
	const char *cmd = c->command;

	if (!strcmp(cmd, "stats"))
		return print_text(c, "stats", c->json ? stoker_stats_json : stoker_stats_text);
	if (!strcmp(cmd, "config"))
		return print_text(c, "config", c->json ? stoker_config_json : stoker_config_text);
	if (!strcmp(cmd, "metrics"))
		return print_text(c, "metrics", stoker_metrics);
	if (!strcmp(cmd, "reload"))
		return print_text(c, "reload", stoker_reload);
	if (!strcmp(cmd, "set"))
		return cmd_set(c, argc, argv);
	if (!strcmp(cmd, "drain"))
		return cmd_drain(c);
	return cmd_top(c);
}

/*
 * The socket to use when neither --socket nor $STOKER_SOCKET names one:
 * the system daemon's, else (where nothing is there) the user-mode
 * daemon's that `pip install`'s Loader starts for this user
 * (docs/slurm.md): $XDG_RUNTIME_DIR/stoker/stoker.sock, or
 * /tmp/stoker-UID/stoker.sock without XDG_RUNTIME_DIR. The rule is
 * stoker/_userd.py's runtime_dir().
 */
static const char *default_socket(char *buf, size_t size)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	struct stat st;
	int n;

	if (stat(STOKER_DEFAULT_SOCKET, &st) == 0 && S_ISSOCK(st.st_mode))
		return STOKER_DEFAULT_SOCKET;
	if (xdg && xdg[0] == '/' && stat(xdg, &st) == 0 && S_ISDIR(st.st_mode))
		n = snprintf(buf, size, "%s/stoker/stoker.sock", xdg);
	else
		n = snprintf(buf, size, "/tmp/stoker-%u/stoker.sock", (unsigned)geteuid());
	if (n < 0 || (size_t)n >= size || stat(buf, &st) != 0 || !S_ISSOCK(st.st_mode))
		return STOKER_DEFAULT_SOCKET;
	return buf;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'},  {"json", no_argument, NULL, 'j'},
		{"timeout", required_argument, NULL, 't'}, {"iterations", required_argument, NULL, 'n'},
		{"delay", required_argument, NULL, 'd'},   {"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},       {NULL, 0, NULL, 0},
	};
	static const char *const commands[] = {"stats", "top", "metrics", "config", "set", "reload", "drain"};
	struct ctl c = {.delay = 1.0};
	const char *socket_path = NULL;
	char user_socket[PATH_MAX];
	bool known = false;
	char *end;
	int opt, r;

	while ((opt = getopt_long(argc, argv, "s:jt:n:d:hV", opts, NULL)) != -1) {
		switch (opt) {
		case 's': socket_path = optarg; break;
		case 'j': c.json = true; break;
		case 't':
			errno = 0;
			c.timeout = strtoul(optarg, &end, 10);
			if (errno || *end || optarg[0] == '-') {
				fprintf(stderr, "stokerctl: --timeout wants seconds, not '%s'\n", optarg);
				return EXIT_USAGE;
			}
			break;
		case 'n':
			c.iterations = strtol(optarg, &end, 10);
			if (*end || c.iterations < 0) {
				fprintf(stderr, "stokerctl: -n wants a count, not '%s'\n", optarg);
				return EXIT_USAGE;
			}
			break;
		case 'd':
			c.delay = strtod(optarg, &end);
			if (*end || !(c.delay >= 0.05 && c.delay <= 3600)) {
				fprintf(stderr, "stokerctl: -d wants 0.05 to 3600 seconds, not '%s'\n", optarg);
				return EXIT_USAGE;
			}
			break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("stokerctl %s\n", stoker_version()); return 0;
		default: usage(stderr); return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	c.command = argv[optind];
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		known = known || !strcmp(c.command, commands[i]);
	if (!known) {
		fprintf(stderr, "stokerctl: unknown command '%s' (try --help)\n", c.command);
		return EXIT_USAGE;
	}
	if (strcmp(c.command, "set") != 0 && optind + 1 < argc) {
		fprintf(stderr, "stokerctl: %s takes no argument '%s'\n", c.command, argv[optind + 1]);
		return EXIT_USAGE;
	}
	if (!socket_path && !getenv("STOKER_SOCKET"))
		socket_path = default_socket(user_socket, sizeof(user_socket));
	r = stoker_connect(socket_path, &c.s);
	if (r < 0) {
		/* The daemon's reason too, when it gave one (max_clients, access). */
		const char *why = stoker_last_error(NULL);
		int more = strcmp(why, strerror(-r)) != 0;

		fprintf(stderr, "stokerctl: cannot reach stokerd at %s: %s%s%s%s\n",
			socket_path ? socket_path
				    : (getenv("STOKER_SOCKET") ? getenv("STOKER_SOCKET") : STOKER_DEFAULT_SOCKET),
			strerror(-r), more ? " (" : "", more ? why : "", more ? ")" : "");
		return EXIT_FAILURE;
	}
	r = run(&c, argc - optind - 1, argv + optind + 1);
	stoker_close(c.s);
	return r;
}
