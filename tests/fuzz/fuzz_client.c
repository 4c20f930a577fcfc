/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: libstoker's reply parser, against a hostile daemon.
 *
 * The library's source is compiled into this file, so a handle can sit on
 * a socketpair with no daemon behind it. The input's first byte picks what
 * the "application" does; the rest is what the "daemon" sends. A feeder
 * thread plays the daemon: it writes the input one frame at a time (cut by
 * the input's own length prefixes), each once the library has read the
 * one before, so replies meet the requests they answer; a sealed memfd
 * rides on the first byte, for an Attached to name as the ring; at the end
 * it hangs up. Meanwhile the library runs the real API: the handshake,
 * attach and a round of next/release/set_epoch/checkpoint/restore and
 * sample names, or
 * statistics (JSON, text, the snapshot lookups), or the configuration and
 * control replies. Whatever arrives, the library must return errors, never
 * crash, leak, read outside the ring or hang.
 */
#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <linux/sockios.h>

#include "../../client/libstoker.c"

#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int ring_fd = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	signal(SIGPIPE, SIG_IGN);
	ring_fd = memfd_create("fuzz-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (ring_fd < 0 || ftruncate(ring_fd, FUZZ_RING_BYTES) < 0 ||
	    fcntl(ring_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		abort();
	return 0;
}

/* What the client wrote: drop it, so its writes never block. Returns
 * false once the client has closed its end. */
static bool drain(int fd)
{
	char buf[65536];
	ssize_t n;

	while ((n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
		;
	return n != 0;
}

struct feeder {
	pthread_t thread;
	int peer, client;
	const uint8_t *data;
	size_t size;
};

static void send_first(int peer, const uint8_t *data)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} control;
	struct iovec iov = {.iov_base = (void *)data, .iov_len = 1};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	struct cmsghdr *c;

	memset(&control, 0, sizeof(control));
	mh.msg_control = control.buf;
	mh.msg_controllen = sizeof(control.buf);
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &ring_fd, sizeof(int));
	if (sendmsg(peer, &mh, MSG_NOSIGNAL) != 1)
		abort();
}

/* The daemon's side: a frame at a time, each once the client's receive
 * queue is empty (it has read the one before), then the hang-up. */
static void *feed(void *arg)
{
	struct feeder *f = arg;
	size_t pos = 0;

	while (pos < f->size) {
		size_t n = f->size - pos;
		int queued = 1;

		if (n >= 4) {
			uint64_t body = (uint64_t)f->data[pos] | (uint64_t)f->data[pos + 1] << 8 |
					(uint64_t)f->data[pos + 2] << 16 | (uint64_t)f->data[pos + 3] << 24;

			if (body + 4 < n)
				n = (size_t)body + 4;
		}
		for (int spins = 0; spins < 200000 && queued > 0; spins++) {
			if (!drain(f->peer))
				goto out; /* the client closed */
			if (ioctl(f->client, SIOCINQ, &queued) < 0)
				queued = 0;
			if (queued > 0)
				sched_yield();
		}
		if (pos == 0) {
			send_first(f->peer, f->data);
			pos++;
			n--;
		}
		while (n > 0) {
			ssize_t w = send(f->peer, f->data + pos, n, MSG_NOSIGNAL);

			if (w <= 0)
				goto out;
			pos += (size_t)w;
			n -= (size_t)w;
		}
	}
out:
	shutdown(f->peer, SHUT_WR);
	while (drain(f->peer))
		usleep(100);
	return NULL;
}

static void touch_batch(const struct stoker_batch *b, volatile uint64_t *sink)
{
	size_t elem = stoker_batch_dtype(b) == STOKER_DTYPE_FLOAT32   ? 4
		      : stoker_batch_dtype(b) == STOKER_DTYPE_FLOAT16 ? 2
								      : 1;
	size_t bytes = (size_t)stoker_batch_count(b) * stoker_batch_height(b) * stoker_batch_width(b) *
		       stoker_batch_channels(b) * elem;
	const uint8_t *img = stoker_batch_images(b);

	/* First and last byte of each array: outside the ring would fault. */
	if (bytes)
		*sink += img[0] + img[bytes - 1];
	*sink += (uint64_t)stoker_batch_labels(b)[0] + (uint64_t)stoker_batch_labels(b)[stoker_batch_count(b) - 1];
	*sink += (uint64_t)stoker_batch_indices(b)[stoker_batch_count(b) - 1];
	*sink += stoker_batch_epoch(b) + stoker_batch_index(b) + stoker_batch_replaced(b);
	/* Detection's per-image metadata: its last element too. */
	if (stoker_batch_shapes(b))
		*sink += (uint64_t)stoker_batch_shapes(b)[4 * (size_t)stoker_batch_count(b) - 1];
	if (stoker_batch_ratio_pad(b))
		*sink += (uint64_t)stoker_batch_ratio_pad(b)[4 * (size_t)stoker_batch_count(b) - 1];
}

static void batches(struct stoker *s)
{
	struct stoker_opts *o = NULL;
	char token[STOKER_CHECKPOINT_MAX];
	volatile uint64_t sink = 0;
	struct stoker_batch *held = NULL;

	if (stoker_opts_new(&o) < 0)
		return;
	stoker_opts_set(o, "batch_size", "2");
	if (stoker_attach(s, "/fuzz", o) < 0) {
		if (getenv("STOKER_FUZZ_DEBUG"))
			fprintf(stderr, "attach: %s\n", stoker_last_error(s));
		stoker_opts_free(o);
		return;
	}
	stoker_opts_free(o);
	for (int i = 0; i < 64; i++) {
		struct stoker_batch *b;
		int r = stoker_next(s, -1, &b);

		if (r == 0) {
			char path[48];

			touch_batch(b, &sink);
			/* a Names reply among the batches; a short buffer at times */
			if (i % 4 == 1 && stoker_sample_path(s, (uint64_t)i * 977 % (stoker_dataset_samples(s) + 1),
							     path, sizeof(path)) >= 0)
				sink += (uint64_t)path[0];
			if (i % 3 == 0) {
				stoker_release(held);
				held = b;
			} else {
				stoker_release(b);
			}
			if (stoker_checkpoint(s, token, sizeof(token)) == 0 && i % 5 == 4)
				stoker_restore(s, token);
		} else if (r == -ENODATA) {
			stoker_set_epoch(s, stoker_epoch(s) + 1);
		} else {
			break;
		}
	}
	if (held)
		touch_batch(held, &sink);
	stoker_release(held);
}

static void statistics(struct stoker *s)
{
	struct stoker_stats *st;
	char *text = NULL;
	double v;

	if (stoker_stats_json(s, &text) == 0)
		free(text);
	if (stoker_stats_text(s, &text) == 0)
		free(text);
	if (stoker_stats_get(s, &st) == 0) {
		static const char *const names[] = {"images_per_second", "workers", "state",
						    "clients",           "cache",   "rss_bytes"};

		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			stoker_stats_number(st, names[i], &v);
			stoker_stats_string(st, names[i]);
		}
		for (size_t i = 0; i < stoker_stats_count(st, "clients") + 1; i++) {
			stoker_stats_item_number(st, "clients", i, "pid", &v);
			stoker_stats_item_string(st, "clients", i, "dataset");
		}
		for (size_t i = 0; i < stoker_stats_count(st, "cache") + 1; i++) {
			stoker_stats_item_number(st, "cache", i, "hits", &v);
			stoker_stats_item_string(st, "cache", i, "tier");
		}
		stoker_stats_free(st);
	}
}

static void control(struct stoker *s)
{
	char *text = NULL;
	uint32_t n;

	if (stoker_config_json(s, &text) == 0)
		free(text);
	if (stoker_config_text(s, &text) == 0)
		free(text);
	if (stoker_metrics(s, &text) == 0)
		free(text);
	stoker_config_set(s, "workers", "2");
	if (stoker_reload(s, &text) == 0)
		free(text);
	stoker_drain(s, 1, &n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Stoker__Message hello = STOKER__MESSAGE__INIT, *reply = NULL;
	Stoker__Hello h = STOKER__HELLO__INIT;
	struct feeder f;
	int sv[2], buf = 4 << 20;
	struct stoker *s;
	uint8_t what;

	if (size < 1 || size > (1u << 20))
		return 0;
	what = data[0];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		abort();
	setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
	if (fcntl(sv[0], F_SETFL, O_NONBLOCK) < 0)
		abort();
	f = (struct feeder){.peer = sv[1], .client = sv[0], .data = data + 1, .size = size - 1};
	if (pthread_create(&f.thread, NULL, feed, &f) != 0)
		abort();

	/* stoker_connect() after its connect(2). */
	s = calloc(1, sizeof(*s));
	if (!s)
		abort();
	frame_in_init(&s->in, CLIENT_MAX_FRAME);
	frame_out_init(&s->out, CLIENT_MAX_QUEUED);
	s->fd = sv[0];
	h.protocol_version = STOKER__VERSION__PROTOCOL_VERSION;
	hello.body_case = STOKER__MESSAGE__BODY_HELLO;
	hello.hello = &h;
	if (request(s, &hello, STOKER__MESSAGE__BODY_WELCOME, -1, &reply) == 0) {
		stoker__message__free_unpacked(reply, NULL);
		switch (what % 4) {
		case 0: batches(s); break;
		case 1: statistics(s); break;
		case 2: control(s); break;
		default:
			statistics(s);
			batches(s);
			control(s);
			break;
		}
	}
	/* The feeder sees the hang-up and ends before the fd is closed. */
	shutdown(sv[0], SHUT_RDWR);
	pthread_join(f.thread, NULL);
	stoker_close(s);
	close(sv[1]);
	return 0;
}
