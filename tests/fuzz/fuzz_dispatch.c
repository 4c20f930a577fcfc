/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: bytes from a client into a real daemon.
 *
 * Each input starts a whole daemon in-process (configuration, worker pool,
 * service timers and signals; no listening socket), hands it one end of a
 * socketpair through server_adopt() (the same path accept takes), writes
 * the input into the other end frame by frame (by the input's own length
 * prefixes; the daemon sees exactly the input's bytes), lets the loop,
 * the data-set scans and the workers settle after each, reads and drops
 * the replies (closing any ring fd), hangs up and stops the daemon the way
 * SIGTERM does. A daemon that leaks, crashes, trips a sanitizer or leaves
 * a libuv handle open fails the run.
 *
 * The peer is an unprivileged user (uid 65534): control requests that
 * change the configuration are refused, so the fuzzer cannot make the
 * daemon write files. Limits are small so one input costs little memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>

#include "cache.h"
#include "daemon.h"
#include "dataset.h"
#include "fuzz_common.h"
#include "log.h"
#include "workers.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wbe");

	if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
		perror(path);
		abort();
	}
}

/* A small real JPEG, made with libjpeg. */
static void write_jpeg(const char *path, unsigned w, unsigned h, int seed)
{
	struct jpeg_compress_struct c;
	struct jpeg_error_mgr e;
	unsigned char *out = NULL;
	unsigned long len = 0;
	uint8_t row[3 * 256];

	c.err = jpeg_std_error(&e);
	jpeg_create_compress(&c);
	jpeg_mem_dest(&c, &out, &len);
	c.image_width = w;
	c.image_height = h;
	c.input_components = 3;
	c.in_color_space = JCS_RGB;
	jpeg_set_defaults(&c);
	if (seed & 1)
		jpeg_simple_progression(&c);
	jpeg_start_compress(&c, TRUE);
	while (c.next_scanline < h) {
		JSAMPROW r = row;

		for (unsigned x = 0; x < w * 3; x++)
			row[x] = (uint8_t)(x * 5 + c.next_scanline * 3 + (unsigned)seed * 40);
		jpeg_write_scanlines(&c, &r, 1);
	}
	jpeg_finish_compress(&c);
	jpeg_destroy_compress(&c);
	write_file(path, out, len);
	free(out);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char path[256];

	(void)argc;
	(void)argv;
	enum log_level level = LOG_LVL_ERR;

	/* STOKER_FUZZ_LOG=debug shows what the daemon makes of an input. */
	if (getenv("STOKER_FUZZ_LOG"))
		log_level_from_string(getenv("STOKER_FUZZ_LOG"), &level);
	log_setup(level);
	signal(SIGPIPE, SIG_IGN);
	mkdir(FUZZ_DATASET, 0755);
	for (int k = 0; k < 2; k++) {
		snprintf(path, sizeof(path), "%s/c%d", FUZZ_DATASET, k);
		mkdir(path, 0755);
	}
	write_jpeg(FUZZ_DATASET "/c0/a.jpg", 40, 30, 0);
	write_jpeg(FUZZ_DATASET "/c0/b.jpg", 33, 47, 1);
	write_jpeg(FUZZ_DATASET "/c1/c.jpg", 64, 20, 2);
	write_jpeg(FUZZ_DATASET "/c1/d.jpg", 16, 16, 3);
	write_file(FUZZ_DATASET "/c1/e.jpg", "\xff\xd8\xff\xe0 not a jpeg", 16);
	return 0;
}

/* Take what the daemon sent: drop it, close any fd that came with it. */
static void drain_peer(int fd)
{
	for (;;) {
		union {
			char buf[CMSG_SPACE(sizeof(int) * 8)];
			struct cmsghdr align;
		} control;
		char data[65536];
		struct iovec iov = {.iov_base = data, .iov_len = sizeof(data)};
		struct msghdr mh = {.msg_iov = &iov,
				    .msg_iovlen = 1,
				    .msg_control = control.buf,
				    .msg_controllen = sizeof(control.buf)};
		ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

		if (n <= 0)
			return;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
				int rfd;

				memcpy(&rfd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				close(rfd);
			}
		}
	}
}

/* Is anything of the daemon's still in motion for its connections? */
static bool busy(const struct daemon *d)
{
	for (const struct conn *c = d->conns; c; c = c->next)
		if (c->attaching || !frame_out_empty(&c->out))
			return true;
	return control_inflight(d) > 0;
}

/* Run the loop until the daemon has done what the bytes so far ask. */
static void settle(struct daemon *d, int peer)
{
	for (int i = 0; i < 20000; i++) {
		drain_peer(peer);
		uv_run(d->loop, UV_RUN_NOWAIT);
		if (!busy(d))
			break;
		/* A scan or a job wakes the loop when it is done. */
		if (i > 8)
			uv_run(d->loop, UV_RUN_ONCE);
	}
	drain_peer(peer);
}

static void write_all(struct daemon *d, int peer, const uint8_t *p, size_t n)
{
	for (int tries = 0; n > 0 && tries < 100000; tries++) {
		ssize_t w = send(peer, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (w > 0) {
			p += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno != EAGAIN)
			return; /* the daemon hung up */
		drain_peer(peer);
		uv_run(d->loop, UV_RUN_NOWAIT);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct daemon d = {.listen_fd = -1, .reserve_fd = -1};
	struct pool_settings ps;
	uv_loop_t loop;
	int sv[2], r;
	size_t pos = 0;

	if (uv_loop_init(&loop) < 0)
		abort();
	config_defaults(&d.conf.raw);
	config_origins_init(&d.conf.origins);
	d.conf.root = "/nonexistent-stoker-fuzz-root";
	/* Small limits: an input may attach, but not to much memory. */
	config_set(&d.conf.raw, "max_batch_size", "16");
	config_set(&d.conf.raw, "max_image_size", "64");
	config_set(&d.conf.raw, "max_prefetch", "4");
	config_set(&d.conf.raw, "max_ring_bytes", "1M");
	config_set(&d.conf.raw, "memory_budget", "64M");
	config_set(&d.conf.raw, "cache_bytes", "1M");
	config_set(&d.conf.raw, "max_image_pixels", "1000000");
	config_set(&d.conf.raw, "stop_timeout_ms", "2000");
	d.cfg = d.conf.raw;
	config_resolve_memory(&d.cfg);
	d.loop = &loop;
	d.start_ns = monotonic_ns();
	if (cache_new(d.cfg.cache_bytes, CACHE_MINIO, &d.cache) < 0)
		abort();
	ps = (struct pool_settings){
		.workers = 1,
		.queue_capacity = 4096,
		.limits = {.max_pixels = d.cfg.max_image_pixels, .max_scans = d.cfg.max_scans},
		.max_file_bytes = d.cfg.max_file_bytes,
		.replace_attempts = d.cfg.replace_attempts,
		.cache = d.cache,
	};
	if (pool_new(&loop, &ps, session_job_done, &d, &d.pool) < 0 || service_start(&d) < 0)
		abort();
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
		abort();
	r = server_adopt(&d, sv[0], getpid(), 65534, 65534);
	if (r < 0)
		abort();

	/* Frame by frame, as the input's own length prefixes cut it. */
	while (pos < size) {
		size_t n = size - pos;

		if (n >= 4) {
			uint64_t body = (uint64_t)data[pos] | (uint64_t)data[pos + 1] << 8 |
					(uint64_t)data[pos + 2] << 16 | (uint64_t)data[pos + 3] << 24;

			if (body + 4 < n)
				n = (size_t)body + 4;
		}
		write_all(&d, sv[1], data + pos, n);
		pos += n;
		settle(&d, sv[1]);
	}
	shutdown(sv[1], SHUT_WR);
	for (int i = 0; i < 1000 && d.conns; i++)
		settle(&d, sv[1]);

	/* As SIGTERM: the loop ends once every handle is closed (a handle left
	 * open hangs here, and libFuzzer's -timeout reports it). */
	service_stop(&d, "fuzz input done");
	uv_run(&loop, UV_RUN_DEFAULT);
	close(sv[1]);
	if (uv_loop_close(&loop) != 0) {
		fprintf(stderr, "fuzz_dispatch: the daemon left libuv handles open\n");
		abort();
	}
	for (size_t i = 0; i < d.ndatasets; i++)
		fprintf(stderr, "fuzz_dispatch: data set %s still open\n", d.datasets[i]->root);
	if (d.ndatasets || d.ring_bytes)
		abort();
	free(d.datasets);
	cache_free(d.cache);
	for (size_t i = 0; i < CONFIG_MAX_KEYS; i++) {
		free(d.conf.runtime[i]);
		free(d.conf.pending[i]);
	}
	return 0;
}
