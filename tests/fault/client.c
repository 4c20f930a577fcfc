/* SPDX-License-Identifier: MIT */
/*
 * fault_client: a small, fast libstoker client for the fault tests
 * (tests/integration/test_faults.py). Starting it costs a fork and an exec,
 * not a Python interpreter, so the tests can kill a thousand of them.
 *
 *   fault_client SOCKET DATASET [KEY=VALUE ...]
 *
 * Keys: any attach option of stoker_opts_set() (batch_size, image_size,
 * seed, rank, world_size, prefetch, epoch, resume, coordinated, ...), and:
 *   mode=hold     take `take` batches (the last one stays held), then obey
 *                 commands on stdin (below). The default.
 *   mode=epochs   read whole epochs from `epoch` on, one line each, until
 *                 `epochs` are done or stdin reaches its end.
 *   take=N        batches to take in hold mode (default 1)
 *   epochs=N      epochs to read in epochs mode (0: until stdin ends)
 *   trace=1       print a B and a C line for every batch taken
 *
 * Lines on stdout, each written with one write(2), so a kill never leaves
 * half a line:
 *   S connected | S attached | S batch N      stages, for kills aimed at them
 *   B EPOCH INDEX COUNT I1,I2,... HASH        a batch taken (trace=1)
 *   C TOKEN                                    the checkpoint after it
 *   E EPOCH BATCHES SAMPLES LOST REPEATED DIGEST   an epoch read whole
 *   R RC ERRNO-NAME MESSAGE                    the result of a command
 *   X RC MESSAGE                               a fatal error (exit status 1)
 * HASH is FNV-1a 64 over the batch's images, labels and indices; DIGEST
 * over the epoch's batch hashes in order. LOST and REPEATED compare the
 * epoch's delivered indices with its expected share (world_size 1 without
 * drop_last: every sample exactly once).
 *
 * Commands in hold mode, one a line: `next MS` (take the next batch,
 * waiting up to MS ms, releasing the held one first unless `keep`), `keep`
 * (do not release on the next `next`), `hash` (re-read the held batch),
 * `release`, `quit`.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <stoker.h>

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	char line[1 << 16];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	for (ssize_t off = 0, w; off < n; off += w) {
		w = write(STDOUT_FILENO, line + off, (size_t)(n - off));
		if (w <= 0)
			return;
	}
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

#define FNV_START 0xcbf29ce484222325ull

static size_t image_bytes(const struct stoker_batch *b)
{
	size_t elem = stoker_batch_dtype(b) == STOKER_DTYPE_FLOAT32   ? 4
		      : stoker_batch_dtype(b) == STOKER_DTYPE_FLOAT16 ? 2
								      : 1;

	return (size_t)stoker_batch_count(b) * stoker_batch_height(b) * stoker_batch_width(b) *
	       stoker_batch_channels(b) * elem;
}

/* Reads every byte of the batch: a kill may land in the middle of it. */
static uint64_t batch_hash(const struct stoker_batch *b)
{
	uint32_t n = stoker_batch_count(b);
	uint64_t h = fnv(FNV_START, stoker_batch_images(b), image_bytes(b));

	h = fnv(h, stoker_batch_labels(b), n * sizeof(int64_t));
	return fnv(h, stoker_batch_indices(b), n * sizeof(int64_t));
}

static const char *errno_name(int e)
{
	switch (e) {
	case 0: return "OK";
	case ENODATA: return "ENODATA";
	case ETIMEDOUT: return "ETIMEDOUT";
	case ECONNRESET: return "ECONNRESET";
	case ECONNABORTED: return "ECONNABORTED";
	case ESHUTDOWN: return "ESHUTDOWN";
	case EPROTO: return "EPROTO";
	case ENOMEM: return "ENOMEM";
	case EINVAL: return "EINVAL";
	case EPIPE: return "EPIPE";
	case ENOENT: return "ENOENT";
	case ECONNREFUSED: return "ECONNREFUSED";
	case EALREADY: return "EALREADY";
	default: return "E?";
	}
}

static void trace_batch(struct stoker *s, const struct stoker_batch *b, uint64_t h)
{
	char idx[1 << 15], token[STOKER_CHECKPOINT_MAX];
	size_t off = 0;

	idx[0] = '\0';
	for (uint32_t i = 0; i < stoker_batch_count(b) && off < sizeof(idx) - 24; i++)
		off += (size_t)snprintf(idx + off, sizeof(idx) - off, "%s%lld", i ? "," : "",
					(long long)stoker_batch_indices(b)[i]);
	say("B %llu %llu %u %s %016llx", (unsigned long long)stoker_batch_epoch(b),
	    (unsigned long long)stoker_batch_index(b), stoker_batch_count(b), idx, (unsigned long long)h);
	if (stoker_checkpoint(s, token, sizeof(token)) == 0)
		say("C %s", token);
}

/* Has stdin reached its end (without blocking)? */
static bool stdin_ended(void)
{
	struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
	char buf[256];

	if (poll(&p, 1, 0) <= 0)
		return false;
	return read(STDIN_FILENO, buf, sizeof(buf)) <= 0;
}

static int run_epochs(struct stoker *s, uint64_t first, uint64_t epochs, bool trace)
{
	uint64_t want = stoker_samples_per_epoch(s), n = stoker_dataset_samples(s);
	uint32_t *seen = calloc(n ? n : 1, sizeof(*seen));
	int r = 0;

	if (!seen)
		return -ENOMEM;
	for (uint64_t e = first; epochs == 0 || e < first + epochs; e++) {
		uint64_t digest = FNV_START, batches = 0, samples = 0, lost = 0, repeated = 0;

		if (e != first && (r = stoker_set_epoch(s, e)) < 0)
			break;
		memset(seen, 0, n * sizeof(*seen));
		for (;;) {
			struct stoker_batch *b;
			uint64_t h;

			r = stoker_next(s, 60000, &b);
			if (r == -ENODATA) {
				r = 0;
				break;
			}
			if (r < 0)
				goto out;
			h = batch_hash(b);
			digest = fnv(digest, &h, sizeof(h));
			for (uint32_t i = 0; i < stoker_batch_count(b); i++) {
				int64_t x = stoker_batch_indices(b)[i];

				if (x >= 0 && (uint64_t)x < n)
					seen[x]++;
			}
			if (trace)
				trace_batch(s, b, h);
			batches++;
			samples += stoker_batch_count(b);
			stoker_release(b);
		}
		/* A world_size-1 epoch without drop_last holds every sample once. */
		if (want == n) {
			for (uint64_t i = 0; i < n; i++) {
				lost += seen[i] == 0;
				repeated += seen[i] > 1 ? seen[i] - 1 : 0;
			}
		}
		say("E %llu %llu %llu %llu %llu %016llx", (unsigned long long)e, (unsigned long long)batches,
		    (unsigned long long)samples, (unsigned long long)lost, (unsigned long long)repeated,
		    (unsigned long long)digest);
		if (epochs == 0 && stdin_ended())
			break;
	}
out:
	free(seen);
	return r;
}

static int run_hold(struct stoker *s, unsigned take, bool trace)
{
	struct stoker_batch *held = NULL;
	bool keep = false;
	char line[256];
	FILE *in;
	int r;

	for (unsigned i = 0; i < take; i++) {
		struct stoker_batch *b;
		uint64_t h;

		r = stoker_next(s, 60000, &b);
		if (r < 0)
			return r;
		h = batch_hash(b);
		if (trace)
			trace_batch(s, b, h);
		stoker_release(held);
		held = b;
		say("S batch %u", i + 1);
	}
	say("S ready %d", (int)getpid());
	in = fdopen(STDIN_FILENO, "r");
	if (!in)
		return -errno;
	while (fgets(line, sizeof(line), in)) {
		if (!strncmp(line, "next", 4)) {
			struct stoker_batch *b;
			int ms = atoi(line + 4);

			if (!keep) {
				stoker_release(held);
				held = NULL;
			}
			keep = false;
			r = stoker_next(s, ms, &b);
			if (r == 0) {
				uint64_t h = batch_hash(b);

				if (trace)
					trace_batch(s, b, h);
				if (held)
					stoker_release(held);
				held = b;
			}
			say("R %d %s %s", r, errno_name(-r), r < 0 ? stoker_last_error(s) : "");
		} else if (!strncmp(line, "keep", 4)) {
			keep = true;
			say("R 0 OK keep");
		} else if (!strncmp(line, "hash", 4)) {
			if (held)
				say("R 0 OK %016llx", (unsigned long long)batch_hash(held));
			else
				say("R %d %s no batch held", -EINVAL, errno_name(EINVAL));
		} else if (!strncmp(line, "release", 7)) {
			stoker_release(held);
			held = NULL;
			say("R 0 OK released");
		} else if (!strncmp(line, "quit", 4)) {
			break;
		}
	}
	stoker_release(held);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = "hold";
	unsigned take = 1;
	uint64_t epochs = 0, first_epoch;
	bool trace = false;
	struct stoker_opts *o = NULL;
	struct stoker *s = NULL;
	int r;

	if (argc < 3) {
		fprintf(stderr, "usage: fault_client SOCKET DATASET [KEY=VALUE ...]\n");
		return 2;
	}
	r = stoker_opts_new(&o);
	for (int i = 3; r == 0 && i < argc; i++) {
		char *eq = strchr(argv[i], '=');

		if (!eq) {
			fprintf(stderr, "fault_client: %s: want KEY=VALUE\n", argv[i]);
			return 2;
		}
		*eq = '\0';
		if (!strcmp(argv[i], "mode"))
			mode = eq + 1;
		else if (!strcmp(argv[i], "take"))
			take = (unsigned)strtoul(eq + 1, NULL, 10);
		else if (!strcmp(argv[i], "epochs"))
			epochs = strtoull(eq + 1, NULL, 10);
		else if (!strcmp(argv[i], "trace"))
			trace = atoi(eq + 1) != 0;
		else {
			r = stoker_opts_set(o, argv[i], eq + 1);
			if (r < 0)
				fprintf(stderr, "fault_client: bad option %s=%s\n", argv[i], eq + 1);
		}
	}
	if (r < 0)
		goto out;
	r = stoker_connect(argv[1], &s);
	if (r < 0) {
		say("X %d %s cannot connect: %s", r, errno_name(-r), stoker_last_error(NULL));
		goto out;
	}
	say("S connected");
	r = stoker_attach(s, argv[2], o);
	if (r < 0) {
		say("X %d %s %s", r, errno_name(-r), stoker_last_error(s));
		goto out;
	}
	first_epoch = stoker_epoch(s); /* a resume token may have set it */
	say("S attached");
	if (!strcmp(mode, "epochs"))
		r = run_epochs(s, first_epoch, epochs, trace);
	else
		r = run_hold(s, take, trace);
	if (r < 0)
		say("X %d %s %s", r, errno_name(-r), stoker_last_error(s));
out:
	stoker_close(s);
	stoker_opts_free(o);
	return r < 0 ? 1 : 0;
}
