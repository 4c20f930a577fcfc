/* SPDX-License-Identifier: MIT */
/*
 * Round-trip cost of the C client's hot path: stoker_release(previous batch)
 * + stoker_next() when the next batch is already in the ring.
 *
 *     stoker_rtt --socket PATH --dataset DIR [--batch 4] [--image-size 32]
 *                [--prefetch 32] [--samples 3000] [--per-round K]
 *
 * Method: rounds of "sleep until the ring is full, then take K batches back
 * to back", timing each release+next. next() is called with timeout 0, so a
 * batch that is not ready is not timed (it is counted, then waited for
 * untimed). K defaults to prefetch - 1: the daemon's workers refill the
 * freed slots while the next ones are timed, as under a trainer. Prints one
 * JSON object with p50/p90/p99/max in µs over all takes, and separately
 * for the first take of each round (the client thread just woke from
 * sleep, the daemon idle) and the others (back to back, caches warm).
 *
 * For scale, the same rounds are then timed on a bare Unix socketpair: one
 * small write that wakes a thread blocked in read() (as release wakes the
 * daemon's loop), then a non-blocking poll+read of a reply already queued
 * (as next() finds BatchReady). Neither protobuf nor the ring is involved:
 * it is what the machine's kernel and scheduler charge for the pattern.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stoker.h>

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull), .tv_nsec = (long)(ns % 1000000000ull)};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double pct(const uint64_t *v, size_t n, double p)
{
	size_t i = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);

	return (double)v[i < n ? i : n - 1] / 1000.0;
}

struct stats {
	size_t n;
	double mean, p50, p90, p99, max;
};

static struct stats summarise(uint64_t *v, size_t n)
{
	struct stats st = {.n = n};
	double sum = 0;

	if (n == 0)
		return st;
	qsort(v, n, sizeof(*v), cmp_u64);
	for (size_t i = 0; i < n; i++)
		sum += (double)v[i];
	st.mean = sum / (double)n / 1000.0;
	st.p50 = pct(v, n, 50);
	st.p90 = pct(v, n, 90);
	st.p99 = pct(v, n, 99);
	st.max = pct(v, n, 100);
	return st;
}

static void print_stats(const char *name, struct stats st, const char *sep)
{
	printf("\"%s\": {\"samples\": %zu, \"mean_us\": %.3f, \"p50_us\": %.3f, \"p90_us\": %.3f, "
	       "\"p99_us\": %.3f, \"max_us\": %.3f}%s",
	       name, st.n, st.mean, st.p50, st.p90, st.p99, st.max, sep);
}

/* The socketpair partner: answer every message (SOCK_SEQPACKET keeps them
 * apart) with a 32-byte reply. */
static void *echo_thread(void *arg)
{
	int fd = *(int *)arg;
	char buf[64] = {0};

	while (read(fd, buf, sizeof(buf)) > 0)
		if (write(fd, buf, 32) != 32)
			break;
	return NULL;
}

/* The baseline rounds: `rounds` x (sleep, per_round timed write + ready read). */
static void baseline(size_t rounds, unsigned per_round, uint64_t pause, uint64_t *first, size_t *nfirst, uint64_t *rest,
		     size_t *nrest)
{
	int sv[2];
	pthread_t t;
	char msg[16] = {1}, buf[256];

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0 ||
	    pthread_create(&t, NULL, echo_thread, &sv[1]) != 0) {
		perror("stoker_rtt: baseline");
		exit(1);
	}
	if (write(sv[0], msg, sizeof(msg)) != sizeof(msg)) /* one reply always queued ahead */
		exit(1);
	*nfirst = *nrest = 0;
	for (size_t k = 0; k < rounds; k++) {
		sleep_ns(pause);
		for (unsigned i = 0; i < per_round; i++) {
			struct pollfd p = {.fd = sv[0], .events = POLLIN};

			uint64_t a = now_ns();
			if (write(sv[0], msg, sizeof(msg)) != sizeof(msg))
				exit(1);
			int ready = poll(&p, 1, 0) == 1 && recv(sv[0], buf, 32, MSG_DONTWAIT) == 32;
			uint64_t e = now_ns();
			if (ready) {
				if (i == 0)
					first[(*nfirst)++] = e - a;
				else
					rest[(*nrest)++] = e - a;
			} else if (read(sv[0], buf, 32) != 32) { /* not ready: wait, untimed */
				exit(1);
			}
		}
	}
	close(sv[0]); /* the partner's read() returns 0 and it exits */
	pthread_join(t, NULL);
	close(sv[1]);
}

static void die(struct stoker *s, const char *what, int r)
{
	fprintf(stderr, "stoker_rtt: %s: %s (%s)\n", what, strerror(-r), s ? stoker_last_error(s) : "");
	exit(1);
}

/* The next batch, moving to the next epoch at the end of one. Blocking. */
static struct stoker_batch *next_blocking(struct stoker *s)
{
	struct stoker_batch *b;
	int r;

	while ((r = stoker_next(s, -1, &b)) == -ENODATA) {
		r = stoker_set_epoch(s, stoker_epoch(s) + 1);
		if (r < 0)
			die(s, "set_epoch", r);
	}
	if (r < 0)
		die(s, "next", r);
	return b;
}

int main(int argc, char **argv)
{
	const char *socket = NULL, *dataset = NULL, *batch = "4", *image_size = "32", *prefetch = "32";
	size_t want = 3000;
	unsigned per_round = 0;

	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v)
			goto usage;
		if (!strcmp(argv[i], "--socket"))
			socket = v;
		else if (!strcmp(argv[i], "--dataset"))
			dataset = v;
		else if (!strcmp(argv[i], "--batch"))
			batch = v;
		else if (!strcmp(argv[i], "--image-size"))
			image_size = v;
		else if (!strcmp(argv[i], "--prefetch"))
			prefetch = v;
		else if (!strcmp(argv[i], "--samples"))
			want = strtoul(v, NULL, 10);
		else if (!strcmp(argv[i], "--per-round"))
			per_round = (unsigned)atoi(v);
		else
			goto usage;
		i++;
	}
	if (!dataset || want == 0)
		goto usage;

	struct stoker *s;
	struct stoker_opts *o;
	int r = stoker_connect(socket, &s);
	if (r < 0)
		die(NULL, "connect", r);
	if ((r = stoker_opts_new(&o)) < 0)
		die(s, "opts_new", r);
	if ((r = stoker_opts_set(o, "batch_size", batch)) < 0 ||
	    (r = stoker_opts_set(o, "image_size", image_size)) < 0 ||
	    (r = stoker_opts_set(o, "prefetch", prefetch)) < 0 ||
	    (r = stoker_opts_set(o, "transform", "random_resized_crop")) < 0)
		die(s, "opts_set", r);
	if ((r = stoker_attach(s, dataset, o)) < 0)
		die(s, "attach", r);
	stoker_opts_free(o);
	unsigned depth = (unsigned)atoi(prefetch);
	if (depth < 2)
		depth = 2;
	if (per_round == 0 || per_round > depth - 1)
		per_round = depth - 1;

	/* How long the daemon takes to produce one batch, to size the sleeps:
	 * drain what attach prefetched, then time `depth` takes at production
	 * rate. */
	struct stoker_batch *held = next_blocking(s);
	for (unsigned i = 0; i < depth; i++) {
		stoker_release(held);
		held = next_blocking(s);
	}
	uint64_t t0 = now_ns();
	for (unsigned i = 0; i < depth; i++) {
		stoker_release(held);
		held = next_blocking(s);
	}
	uint64_t per_batch = (now_ns() - t0) / depth;
	uint64_t fill = per_batch * (depth + 2) * 2; /* an empty ring to full, with margin */
	uint64_t pause = per_batch * (per_round + 2) * 2;

	uint64_t *lat = calloc(want, sizeof(*lat)), *first = calloc(want, sizeof(*first)),
		 *rest = calloc(want, sizeof(*rest));
	size_t n = 0, nfirst = 0, nrest = 0, not_ready = 0, rounds = 0;
	unsigned sink = 0;
	bool refill_all = true;
	if (!lat || !first || !rest)
		return 1;
	while (n < want) {
		/* Let the ring fill: all of it at first and after an epoch change,
		 * else the per_round batches taken last round. */
		sleep_ns(refill_all ? fill : pause);
		refill_all = false;
		rounds++;
		for (unsigned i = 0; i < per_round && n < want; i++) {
			struct stoker_batch *b;

			uint64_t a = now_ns();
			stoker_release(held);
			r = stoker_next(s, 0, &b);
			uint64_t e = now_ns();
			if (r == 0) {
				lat[n++] = e - a;
				if (i == 0)
					first[nfirst++] = e - a;
				else
					rest[nrest++] = e - a;
				held = b;
			} else if (r == -ETIMEDOUT) {
				not_ready++;
				held = next_blocking(s);
			} else if (r == -ENODATA) {
				held = next_blocking(s); /* new epoch: its ring starts empty */
				refill_all = true;
				break;
			} else {
				die(s, "next", r);
			}
			sink += ((const uint8_t *)stoker_batch_images(held))[0]; /* the mapping is real */
		}
	}
	stoker_release(held);
	stoker_close(s);

	printf("{\"not_ready\": %zu, \"rounds\": %zu, \"batch\": %s, \"image_size\": %s, \"prefetch\": %u, "
	       "\"per_round\": %u, \"batch_ms\": %.3f, \"checksum\": %u, ",
	       not_ready, rounds, batch, image_size, depth, per_round, (double)per_batch / 1e6, sink);
	print_stats("all", summarise(lat, n), ", ");
	print_stats("first_after_sleep", summarise(first, nfirst), ", ");
	print_stats("back_to_back", summarise(rest, nrest), ", ");
	baseline(rounds, per_round, pause, first, &nfirst, rest, &nrest);
	printf("\"baseline_socketpair\": {");
	print_stats("first_after_sleep", summarise(first, nfirst), ", ");
	print_stats("back_to_back", summarise(rest, nrest), "}}\n");
	free(lat);
	free(first);
	free(rest);
	return 0;
usage:
	fprintf(stderr, "usage: stoker_rtt --socket PATH --dataset DIR [--batch N] [--image-size N] "
			"[--prefetch N] [--samples N]\n");
	return 2;
}
