/* SPDX-License-Identifier: MIT */
/*
 * gpu_check: the GPU tests of CUDA delivery (tests/gpu/run.sh runs them
 * against a real stokerd on a machine with a GPU). Each prints
 * "PASS name: ..." or "FAIL name: ..." and exits 0 or 1.
 *
 *   gpu_check SOCKET DATASET identity       device uint8 batches byte-identical to host
 *                                           batches of the same seed; float32 identical,
 *                                           float16 within 1 ulp, to the CPU float path
 *   gpu_check SOCKET DATASET multi          two clients (ranks) of one job and a second
 *                                           job on one GPU, interleaved, each checked
 *   gpu_check SOCKET DATASET kill N         N CUDA clients SIGKILLed at every stage:
 *                                           the GPU's free memory back to its baseline
 *   gpu_check SOCKET DATASET daemon-kill PID
 *                                           SIGKILL stokerd under a client: a clear error,
 *                                           the held batch still readable
 *   gpu_check SOCKET DATASET budget         (a daemon with gpu_memory_budget=1M) refused
 *   gpu_check SOCKET DATASET nodevice       cuda:99 refused, says why
 *   gpu_check SOCKET DATASET stats          stats show the client's device and bytes
 *   gpu_check SOCKET DATA.YAML detect       task=detect (letterbox, mosaic, rect letterbox): device images
 *                                           equal to host ones, boxes (host) equal
 *   gpu_check SOCKET DATASET child SEED DTYPE TAKE   (kill's child) attach, take, say "ready"
 *   gpu_check SOCKET DATASET killed-release
 *                                           two float clients with their streams blocked before
 *                                           their releases (copies wait on them): 12 others keep
 *                                           being served; the first SIGKILLed, its ring freed
 *                                           while the second's stream is still blocked (no
 *                                           device-wide sync); then the second; free memory
 *                                           back to its baseline (issue 25, items 1, 2)
 *   gpu_check SOCKET DATASET stuck-child    (killed-release's child)
 *   gpu_check SOCKET DATASET close-waits    closing with a read of the held batch still
 *                                           queued waits for it before unmapping (item 3)
 *   gpu_check SOCKET DATASET async-error    (a daemon with STOKER_TEST_GPU_FAULT=illegal-address)
 *                                           the faulting copy fails the session with the reason,
 *                                           the daemon recovers for the next client (items 4, 9)
 *   gpu_check SOCKET DATASET release-timeout
 *                                           (a daemon with STOKER_TEST_GPU_RELEASE_AFTER_S=3) a
 *                                           release that never reaches the GPU fails the ring (item 4)
 *   gpu_check SOCKET DATASET pin-context    pin_memory makes no context; uses the current one (item 7)
 *   gpu_check SOCKET DATASET context-release
 *                                           the daemon's context goes with its last ring; its size
 *                                           against GPU_CONTEXT_BYTES (item 9)
 *
 * CUDA through the driver API, loaded at run time like libstoker does.
 */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <stoker.h>

#include "cudadrv.h"

#define WAVE 10 /* kill: children alive at once */

static const struct cudadrv *drv;
static CUresult (*memcpy_dtoh)(void *, CUdeviceptr, size_t);
static CUresult (*memcpy_dtod_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
static CUresult (*stream_sync)(CUstream);
static CUstream stream;
static CUcontext ctx;
static const char *sock, *dataset, *test_name = "?";

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
	va_list ap;

	printf("FAIL %s: ", test_name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(1);
}

static void pass(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void pass(const char *fmt, ...)
{
	va_list ap;

	printf("PASS %s: ", test_name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

static void cuda_init(void)
{
	const char *why;
	CUdevice dev;

	if (cudadrv_get(&drv, &why) < 0)
		fail("CUDA: %s", why);
	*(void **)&memcpy_dtoh = dlsym(drv->lib, "cuMemcpyDtoH_v2");
	*(void **)&stream_sync = dlsym(drv->lib, "cuStreamSynchronize");
	*(void **)&memcpy_dtod_async = dlsym(drv->lib, "cuMemcpyDtoDAsync_v2");
	if (!memcpy_dtoh || !stream_sync || !memcpy_dtod_async)
		fail("the driver lacks cuMemcpyDtoH_v2 or cuStreamSynchronize");
	if (drv->cuDeviceGet(&dev, 0) || drv->cuDevicePrimaryCtxRetain(&ctx, dev) || drv->cuCtxPushCurrent(ctx) ||
	    drv->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING))
		fail("cannot set up cuda:0");
}

static size_t free_memory(void)
{
	size_t free_b = 0, total = 0;

	if (drv->cuMemGetInfo(&free_b, &total))
		fail("cuMemGetInfo");
	return free_b;
}

static struct stoker *attach_opts(const char *const *kv, int *err)
{
	struct stoker *s = NULL;
	struct stoker_opts *o = NULL;
	int r;

	r = stoker_connect(sock, &s);
	if (r < 0)
		fail("connect %s: %s", sock, stoker_last_error(NULL));
	stoker_opts_new(&o);
	for (; kv[0]; kv += 2)
		if (stoker_opts_set(o, kv[0], kv[1]) < 0)
			fail("option %s=%s", kv[0], kv[1]);
	r = stoker_attach(s, dataset, o);
	stoker_opts_free(o);
	if (err) {
		*err = r;
		if (r < 0)
			return s;
	} else if (r < 0) {
		fail("attach: %s (%s)", strerror(-r), stoker_last_error(s));
	}
	return s;
}

static struct stoker *attach(const char *device, const char *dtype, const char *seed, const char *rank,
			     const char *world)
{
	const char *kv[] = {"device",     device, "dtype",      dtype, "seed",       seed,
			    "rank",       rank,   "world_size", world, "batch_size", "16",
			    "image_size", "64",   "prefetch",   "3",   NULL};

	return attach_opts(kv, NULL);
}

static size_t elem_size(enum stoker_dtype t)
{
	return t == STOKER_DTYPE_FLOAT32 ? 4 : t == STOKER_DTYPE_FLOAT16 ? 2 : 1;
}

/* Distance in ulps between two IEEE halves of the same sign class. */
static unsigned half_ulps(uint16_t a, uint16_t b)
{
	int ia = (a & 0x8000) ? -(int)(a & 0x7FFF) : (int)a;
	int ib = (b & 0x8000) ? -(int)(b & 0x7FFF) : (int)b;

	return (unsigned)abs(ia - ib);
}

/* One batch of each: same batch, same labels and indices, images equal
 * (float16: within 1 ulp). Returns the largest ulp distance seen. */
static unsigned compare_batch(struct stoker_batch *dev, struct stoker_batch *host, uint8_t *buf)
{
	uint32_t n = stoker_batch_count(host);
	size_t bytes = (size_t)n * stoker_batch_height(host) * stoker_batch_width(host) * 3 *
		       elem_size(stoker_batch_dtype(host));
	const uint8_t *h = stoker_batch_images(host);
	unsigned worst = 0;

	if (stoker_batch_index(dev) != stoker_batch_index(host) || stoker_batch_count(dev) != n ||
	    stoker_batch_dtype(dev) != stoker_batch_dtype(host))
		fail("batch %llu/%u vs %llu/%u", (unsigned long long)stoker_batch_index(dev), stoker_batch_count(dev),
		     (unsigned long long)stoker_batch_index(host), n);
	if (memcmp(stoker_batch_labels(dev), stoker_batch_labels(host), n * 8) ||
	    memcmp(stoker_batch_indices(dev), stoker_batch_indices(host), n * 8))
		fail("batch %llu: labels or indices differ", (unsigned long long)stoker_batch_index(host));
	if (stoker_batch_images(dev) != NULL || !stoker_batch_device_images(dev))
		fail("a device batch must have device images only");
	if (stoker_batch_wait(dev, stream) < 0)
		fail("stoker_batch_wait");
	if (memcpy_dtoh(buf, (CUdeviceptr)stoker_batch_device_images(dev), bytes) || stream_sync(stream))
		fail("copying the device batch back");
	if (stoker_batch_dtype(host) != STOKER_DTYPE_FLOAT16) {
		if (memcmp(buf, h, bytes))
			fail("batch %llu: device images differ from the host batch",
			     (unsigned long long)stoker_batch_index(host));
		return 0;
	}
	for (size_t i = 0; i < bytes / 2; i++) {
		uint16_t a, b;
		unsigned u;

		memcpy(&a, buf + 2 * i, 2);
		memcpy(&b, h + 2 * i, 2);
		u = half_ulps(a, b);
		if (u > worst)
			worst = u;
	}
	if (worst > 1)
		fail("batch %llu: float16 %u ulps from the CPU path", (unsigned long long)stoker_batch_index(host),
		     worst);
	return worst;
}

/* Whole epochs of `pairs` (device, host) handles, interleaved. */
static uint64_t compare_epochs(struct stoker **dev, struct stoker **host, int pairs, unsigned *worst)
{
	uint8_t *buf = malloc(64u << 20);
	bool done[8] = {false};
	int left = pairs;
	uint64_t batches = 0;

	if (!buf)
		fail("out of memory");
	while (left > 0) {
		for (int i = 0; i < pairs; i++) {
			struct stoker_batch *a, *b;
			int ra, rb;
			unsigned u;

			if (done[i])
				continue;
			ra = stoker_next(dev[i], 120000, &a);
			rb = stoker_next(host[i], 120000, &b);
			if (ra == -ENODATA && rb == -ENODATA) {
				done[i] = true;
				left--;
				continue;
			}
			if (ra < 0 || rb < 0)
				fail("next: %s / %s (%s %s)", strerror(-ra), strerror(-rb), stoker_last_error(dev[i]),
				     stoker_last_error(host[i]));
			u = compare_batch(a, b, buf);
			if (u > *worst)
				*worst = u;
			stoker_release(a);
			stoker_release(b);
			batches++;
		}
	}
	free(buf);
	return batches;
}

static void test_identity(void)
{
	static const char *const dtypes[] = {"uint8", "float32", "float16"};

	for (int k = 0; k < 3; k++) {
		struct stoker *dev = attach("cuda:0", dtypes[k], "11", "0", "1");
		struct stoker *host = attach("cpu", dtypes[k], "11", "0", "1");
		unsigned worst = 0;
		uint64_t n;

		test_name = dtypes[k];
		if (stoker_device(dev) != 0 || stoker_device(host) != -1)
			fail("stoker_device: %d and %d", stoker_device(dev), stoker_device(host));
		n = compare_epochs(&dev, &host, 1, &worst);
		/* A second epoch reuses every slot: ordering by events holds. */
		stoker_set_epoch(dev, 1);
		stoker_set_epoch(host, 1);
		n += compare_epochs(&dev, &host, 1, &worst);
		if (n != 2 * stoker_batches_per_epoch(host))
			fail("%llu batches, expected %llu", (unsigned long long)n,
			     (unsigned long long)(2 * stoker_batches_per_epoch(host)));
		pass("%llu batches over 2 epochs equal to the host's%s", (unsigned long long)n,
		     k == 2 ? (worst ? " (within 1 ulp)" : " (bit for bit)") : " (bit for bit)");
		stoker_close(dev);
		stoker_close(host);
	}
}

static void test_multi(void)
{
	struct stoker *dev[3], *host[3];
	unsigned worst = 0;
	uint64_t n;

	test_name = "multi";
	dev[0] = attach("cuda:0", "uint8", "7", "0", "2");
	dev[1] = attach("cuda:0", "uint8", "7", "1", "2");
	dev[2] = attach("cuda:0", "float32", "8", "0", "1");
	host[0] = attach("cpu", "uint8", "7", "0", "2");
	host[1] = attach("cpu", "uint8", "7", "1", "2");
	host[2] = attach("cpu", "float32", "8", "0", "1");
	n = compare_epochs(dev, host, 3, &worst);
	pass("two ranks of one job and a second job on cuda:0, %llu batches, each equal to its host reference",
	     (unsigned long long)n);
	for (int i = 0; i < 3; i++) {
		stoker_close(dev[i]);
		stoker_close(host[i]);
	}
}

/* A daemon-wide number (client < 0), a client's, or (name "clients") the
 * number of attached clients. */
static double stat_number(const char *name, int client, const char *field)
{
	struct stoker *s;
	struct stoker_stats *st;
	double v = -1;

	if (stoker_connect(sock, &s) < 0 || stoker_stats_get(s, &st) < 0)
		fail("stats");
	if (client < 0 && !strcmp(name, "clients"))
		v = (double)stoker_stats_count(st, "clients");
	else if (client < 0)
		stoker_stats_number(st, name, &v);
	else if ((size_t)client < stoker_stats_count(st, "clients"))
		stoker_stats_item_number(st, "clients", (size_t)client, field, &v);
	stoker_stats_free(st);
	stoker_close(s);
	return v;
}

static void sleep_ms(long ms)
{
	struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&t, NULL);
}

/* Wait (bounded) until the daemon holds no device ring. */
static void wait_device_bytes_zero(void)
{
	for (int i = 0; i < 600; i++) {
		if (stat_number("device_bytes", -1, NULL) == 0 && stat_number("clients", -1, NULL) == 0)
			return;
		sleep_ms(100);
	}
	fail("the daemon still holds %.0f device bytes after 60 s", stat_number("device_bytes", -1, NULL));
}

static void child(const char *seed, const char *dtype, int take)
{
	const char *kv[] = {"device",     "cuda:0", "dtype",      dtype, "seed", seed,
			    "batch_size", "16",     "image_size", "64",  NULL};
	struct stoker *s = attach_opts(kv, NULL);
	struct stoker_batch *b;

	for (int i = 0; i < take; i++) {
		if (stoker_next(s, 60000, &b) < 0)
			fail("child next: %s", stoker_last_error(s));
		if (i + 1 < take)
			stoker_release(b);
	}
	printf("ready\n");
	fflush(stdout);
	pause();
	exit(0);
}

static void test_kill(const char *self, int n)
{
	static const char *const dtypes[] = {"uint8", "float16", "float32"};
	size_t base, now = 0;
	int killed_ready = 0, killed_early = 0;

	test_name = "kill";
	cuda_init();
	/* Warm up: the daemon's context and kernels exist before the baseline. */
	{
		struct stoker *s = attach("cuda:0", "float32", "1", "0", "1");
		struct stoker_batch *b;

		if (stoker_next(s, 60000, &b) < 0)
			fail("warm-up next");
		stoker_release(b);
		stoker_close(s);
	}
	wait_device_bytes_zero();
	base = free_memory();
	/* Waves of up to WAVE children at once: each makes its own CUDA
	 * context, which is what takes the time. */
	for (int first = 0; first < n; first += WAVE) {
		int pipes[WAVE];
		pid_t pids[WAVE];
		int m = n - first < WAVE ? n - first : WAVE;

		for (int k = 0; k < m; k++) {
			int i = first + k, pipefd[2];
			char seed[16], take[16];

			snprintf(seed, sizeof(seed), "%d", i);
			snprintf(take, sizeof(take), "%d", 1 + i % 3);
			if (pipe(pipefd) < 0)
				fail("pipe");
			pids[k] = fork();
			if (pids[k] == 0) {
				dup2(pipefd[1], 1);
				close(pipefd[0]);
				execl("/proc/self/exe", self, sock, dataset, "child", seed, dtypes[i % 3], take,
				      (char *)NULL);
				_exit(127);
			}
			close(pipefd[1]);
			pipes[k] = pipefd[0];
		}
		for (int k = 0; k < m; k++) {
			int i = first + k;

			if (i % 4 == 3) {
				/* Mid-attach or mid-batch: whatever stage it reached. */
				sleep_ms((i * 37) % 150);
				killed_early++;
			} else {
				struct pollfd p = {.fd = pipes[k], .events = POLLIN};
				char line[64] = "";

				if (poll(&p, 1, 60000) <= 0 || read(pipes[k], line, sizeof(line) - 1) <= 0 ||
				    strncmp(line, "ready", 5))
					fail("child %d never got its batches", i);
				killed_ready++;
			}
			kill(pids[k], SIGKILL);
		}
		for (int k = 0; k < m; k++) {
			waitpid(pids[k], NULL, 0);
			close(pipes[k]);
		}
	}
	wait_device_bytes_zero();
	for (int i = 0; i < 300; i++) {
		now = free_memory();
		if (now + (2u << 20) >= base)
			break;
		sleep_ms(100);
	}
	if (now + (2u << 20) < base)
		fail("GPU free memory %zu, baseline %zu: %zu bytes not given back", now, base, base - now);
	/* Still serving, and right. */
	{
		struct stoker *dev = attach("cuda:0", "uint8", "5", "0", "1");
		struct stoker *host = attach("cpu", "uint8", "5", "0", "1");
		unsigned worst = 0;

		compare_epochs(&dev, &host, 1, &worst);
		stoker_close(dev);
		stoker_close(host);
	}
	pass("%d CUDA clients SIGKILLed (%d holding batches, %d at earlier stages); free memory %zu vs baseline %zu; "
	     "daemon still serving correct batches",
	     n, killed_ready, killed_early, now, base);
}

static void test_daemon_kill(pid_t daemon)
{
	struct stoker *s;
	struct stoker_batch *b, *b2;
	uint8_t *before, *after;
	size_t bytes;
	int r;

	test_name = "daemon-kill";
	cuda_init();
	s = attach("cuda:0", "float16", "3", "0", "1");
	if (stoker_next(s, 60000, &b) < 0 || stoker_batch_wait(b, stream) < 0)
		fail("next: %s", stoker_last_error(s));
	bytes = (size_t)stoker_batch_count(b) * 64 * 64 * 3 * 2;
	before = malloc(bytes);
	after = malloc(bytes);
	if (!before || !after || memcpy_dtoh(before, (CUdeviceptr)stoker_batch_device_images(b), bytes))
		fail("reading the held batch");
	kill(daemon, SIGKILL);
	sleep_ms(200);
	for (int i = 0; i < 100; i++) {
		r = stoker_next(s, 1000, &b2);
		if (r == 0) {
			stoker_release(b2); /* announced before the kill */
			continue;
		}
		break;
	}
	if (r != -ECONNRESET || !stoker_last_error(s)[0])
		fail("after SIGKILL of stokerd, next gave %d (%s), expected ECONNRESET with a message", r,
		     stoker_last_error(s));
	/* The held batch stays readable: the mapping holds the memory. */
	if (memcpy_dtoh(after, (CUdeviceptr)stoker_batch_device_images(b), bytes) || memcmp(before, after, bytes))
		fail("the held device batch changed or became unreadable after the daemon died");
	stoker_release(b);
	stoker_close(s);
	pass("next: ECONNRESET \"%s\"; the held device batch stays readable", "the daemon closed the connection");
	free(before);
	free(after);
}

/* A host word the GPU can wait on: `stream` blocks until it is set (a
 * training step that never ends, as far as the GPU is concerned). */
struct gate {
	uint64_t *word;
	CUdeviceptr dev;
};

static void gate_make(struct gate *g)
{
	g->word = aligned_alloc(4096, 4096);
	if (!g->word)
		fail("gate: out of memory");
	memset(g->word, 0, 4096);
	if (drv->cuMemHostRegister(g->word, 4096, CU_MEMHOSTREGISTER_DEVICEMAP) ||
	    drv->cuMemHostGetDevicePointer(&g->dev, g->word, 0))
		fail("gate: cannot register a host word");
}

static void gate_block(struct gate *g, CUstream s)
{
	if (drv->cuStreamWaitValue64(s, g->dev, 1, CU_STREAM_WAIT_VALUE_GEQ))
		fail("cuStreamWaitValue64");
}

static void gate_open(struct gate *g)
{
	__atomic_store_n(g->word, 1, __ATOMIC_RELEASE);
}

static void warm_up_and_settle(void)
{
	struct stoker *s = attach("cuda:0", "float32", "1", "0", "1");
	struct stoker_batch *b;

	if (stoker_next(s, 60000, &b) < 0)
		fail("warm-up next: %s", stoker_last_error(s));
	stoker_release(b);
	stoker_close(s);
	wait_device_bytes_zero();
}

/* Free memory back to `base` (2 MiB of slack), waiting up to 30 s. */
static size_t wait_free_memory(size_t base)
{
	size_t now = 0;

	for (int i = 0; i < 300; i++) {
		now = free_memory();
		if (now + (2u << 20) >= base)
			return now;
		sleep_ms(100);
	}
	fail("GPU free memory %zu, baseline %zu: %zu bytes not given back", now, base, base - now);
}

/* killed-release's child: a float ring (staging buffer: stream-ordered
 * free), one batch read on a stream that a gate blocks for ever, released
 * behind the gate; the daemon refills the slot (its copy waits on the
 * release word); then "ready" and wait to be killed. */
static void stuck_child(void)
{
	const char *kv[] = {"device", "cuda:0",     "dtype", "float32",  "seed", "7", "batch_size",
			    "16",     "image_size", "64",    "prefetch", "3",    NULL};
	struct stoker *s;
	struct stoker_batch *b;
	struct gate gate;

	test_name = "stuck-child";
	cuda_init();
	gate_make(&gate);
	s = attach_opts(kv, NULL);
	if (stoker_next(s, 60000, &b) < 0)
		fail("child next: %s", stoker_last_error(s));
	gate_block(&gate, stream);
	if (stoker_batch_wait(b, stream) < 0)
		fail("child wait");
	stoker_release(b);
	/* The daemon refills the slot: its copy waits on our release word. */
	for (int i = 0; i < 3; i++)
		if (stoker_next(s, 60000, &b) == 0)
			stoker_release(b);
	sleep_ms(300);
	printf("ready\n");
	fflush(stdout);
	pause();
	exit(0);
}

#define OTHERS 12 /* more rings than the default 8 hardware queues (run.sh sets 32, as the drop-in does) */

/* A stuck-child, started; returns its pid once it said "ready". */
static pid_t spawn_stuck(const char *self)
{
	int pipefd[2];
	char line[64] = "";
	struct pollfd p;
	pid_t pid;

	if (pipe(pipefd) < 0)
		fail("pipe");
	pid = fork();
	if (pid == 0) {
		dup2(pipefd[1], 1);
		close(pipefd[0]);
		execl("/proc/self/exe", self, sock, dataset, "stuck-child", (char *)NULL);
		_exit(127);
	}
	close(pipefd[1]);
	p = (struct pollfd){.fd = pipefd[0], .events = POLLIN};
	if (poll(&p, 1, 60000) <= 0 || read(pipefd[0], line, sizeof(line) - 1) <= 0 || strncmp(line, "ready", 5))
		fail("a stuck child never got its batches (%s)", line);
	close(pipefd[0]);
	return pid;
}

/* Wait (bounded) until every device byte the daemon holds is an attached
 * client's: no ring of a gone client left. */
static void wait_no_orphan_ring(void)
{
	double total = 0, sum = 0;

	for (int i = 0; i < 600; i++) {
		int n = (int)stat_number("clients", -1, NULL);

		sum = 0;
		for (int k = 0; k < n; k++)
			sum += stat_number("", k, "device_bytes");
		total = stat_number("device_bytes", -1, NULL);
		if (total == sum)
			return;
		sleep_ms(100);
	}
	fail("a gone client's ring is still held after 60 s (%.0f device bytes, %.0f of them attached clients')", total,
	     sum);
}

static void test_killed_release(const char *self)
{
	struct stoker *other[OTHERS];
	struct stoker_batch *b;
	size_t base, now;
	int served = 0;
	pid_t a, z;

	test_name = "killed-release";
	cuda_init();
	warm_up_and_settle();
	base = free_memory();
	for (int k = 0; k < OTHERS; k++) {
		char seed[16];

		snprintf(seed, sizeof(seed), "%d", 20 + k);
		other[k] = attach("cuda:0", "uint8", seed, "0", "1");
	}
	a = spawn_stuck(self);
	z = spawn_stuck(self);
	/* A ring whose stream is blocked must not hold up another's. */
	for (int i = 0; i < 8; i++)
		for (int k = 0; k < OTHERS; k++, served++) {
			if (stoker_next(other[k], 30000, &b) < 0)
				fail("client %d stalled while other rings' copies wait on releases: %s", k,
				     stoker_last_error(other[k]));
			stoker_release(b);
		}
	/* The first stuck client dies: its float ring (its staging buffer
	 * among it) is freed while the second's stream is still blocked, which
	 * a device-wide synchronisation (cuMemFree) would wait on for ever. */
	kill(a, SIGKILL);
	waitpid(a, NULL, 0);
	wait_no_orphan_ring();
	for (int k = 0; k < OTHERS; k++)
		for (int i = 0; i < 4; i++, served++) {
			if (stoker_next(other[k], 30000, &b) < 0)
				fail("client %d stalled after the kill: %s", k, stoker_last_error(other[k]));
			stoker_release(b);
		}
	kill(z, SIGKILL);
	waitpid(z, NULL, 0);
	for (int k = 0; k < OTHERS; k++)
		stoker_close(other[k]);
	/* Without the daemon writing the dead clients' release words, their
	 * rings would never drain: device bytes would stay. */
	wait_device_bytes_zero();
	now = wait_free_memory(base);
	pass("two clients SIGKILLed behind blocked releases: the first's ring freed while the second's stream was "
	     "still blocked, both freed; %d batches served to %d other clients meanwhile; free memory %zu vs "
	     "baseline %zu",
	     served, OTHERS, now, base);
}

/* Close while a read of the held batch is queued behind a gate: close
 * returns only after the gate opens and the read has run. */
struct closer {
	struct stoker *s;
	int done;
};

static void *close_thread(void *arg)
{
	struct closer *c = arg;

	stoker_close(c->s);
	__atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void test_close_waits(void)
{
	const char *kv[] = {"device",     "cuda:0", "dtype",      "uint8", "seed", "4",
			    "batch_size", "16",     "image_size", "64",    NULL};
	struct closer c = {0};
	struct stoker_batch *b;
	struct gate gate;
	CUdeviceptr copy = 0;
	uint8_t *want, *got;
	size_t bytes;
	pthread_t t;

	test_name = "close-waits";
	cuda_init();
	gate_make(&gate);
	c.s = attach_opts(kv, NULL);
	if (stoker_next(c.s, 60000, &b) < 0)
		fail("next: %s", stoker_last_error(c.s));
	bytes = (size_t)stoker_batch_count(b) * 64 * 64 * 3;
	want = malloc(bytes);
	got = malloc(bytes);
	if (!want || !got || drv->cuMemAlloc(&copy, bytes) ||
	    memcpy_dtoh(want, (CUdeviceptr)stoker_batch_device_images(b), bytes))
		fail("setting up");
	gate_block(&gate, stream);
	if (memcpy_dtod_async(copy, (CUdeviceptr)stoker_batch_device_images(b), bytes, stream) ||
	    stoker_batch_wait(b, stream) < 0)
		fail("queueing the read");
	if (pthread_create(&t, NULL, close_thread, &c))
		fail("pthread_create");
	sleep_ms(500);
	if (__atomic_load_n(&c.done, __ATOMIC_ACQUIRE))
		fail("stoker_close returned while a read of the held batch was still queued");
	gate_open(&gate);
	pthread_join(t, NULL);
	if (stream_sync(stream) || memcpy_dtoh(got, copy, bytes))
		fail("the queued read failed (the ring was unmapped under it?)");
	if (memcmp(want, got, bytes))
		fail("the queued read saw other bytes than the batch");
	drv->cuMemFree(copy);
	pass("stoker_close waited for the read queued on the held batch, which saw the batch's bytes");
}

/* The daemon's first float copy faults (STOKER_TEST_GPU_FAULT): the
 * session ends with the reason; the next client is served (a new context). */
static void test_async_error(void)
{
	struct stoker *s = attach("cuda:0", "float32", "1", "0", "1");
	struct stoker_batch *b;
	int r = 0;

	test_name = "async-error";
	for (int i = 0; i < 20 && r == 0; i++) {
		r = stoker_next(s, 60000, &b);
		if (r == 0)
			stoker_release(b);
	}
	if (r == 0 || r == -ETIMEDOUT || !strstr(stoker_last_error(s), "GPU"))
		fail("a faulting copy gave %d (%s); expected the session to end with the GPU's error", r,
		     stoker_last_error(s));
	printf("the session ended: %s\n", stoker_last_error(s));
	stoker_close(s);
	wait_device_bytes_zero();
	{
		struct stoker *dev = attach("cuda:0", "float32", "5", "0", "1");
		struct stoker *host = attach("cpu", "float32", "5", "0", "1");
		unsigned worst = 0;

		compare_epochs(&dev, &host, 1, &worst);
		stoker_close(dev);
		stoker_close(host);
	}
	pass("an asynchronous GPU error ended its session with \"%s\"-like reason; the next client got correct "
	     "batches",
	     "the GPU reported an error");
}

/* A release that never reaches the GPU (the client's stream blocked past
 * STOKER_TEST_GPU_RELEASE_AFTER_S): the ring fails with the reason. */
static void test_release_timeout(void)
{
	const char *kv[] = {"device", "cuda:0",     "dtype", "uint8",    "seed", "4", "batch_size",
			    "16",     "image_size", "64",    "prefetch", "1",    NULL};
	struct stoker *s;
	struct stoker_batch *b;
	struct gate gate;
	int r = 0;

	test_name = "release-timeout";
	gate_make(&gate);
	s = attach_opts(kv, NULL);
	if (stoker_next(s, 60000, &b) < 0)
		fail("next: %s", stoker_last_error(s));
	gate_block(&gate, stream);
	stoker_batch_wait(b, stream);
	stoker_release(b);
	for (int i = 0; i < 50 && r == 0; i++) {
		r = stoker_next(s, 60000, &b);
		if (r == 0)
			stoker_release(b);
	}
	if (r == 0 || !strstr(stoker_last_error(s), "release never reached the GPU"))
		fail("gave %d (%s); expected the watchdog's reason", r, stoker_last_error(s));
	printf("%s\n", stoker_last_error(s));
	gate_open(&gate);
	stoker_close(s);
	wait_device_bytes_zero();
	pass("a release that never reached the GPU failed its ring with the reason; the ring was freed");
}

static void test_pin_context(void)
{
	const char *try_kv[] = {"pin_memory", "try", "batch_size", "16", "image_size", "64", NULL};
	const char *req_kv[] = {"pin_memory", "true", "batch_size", "16", "image_size", "64", NULL};
	struct stoker *s;
	const char *why;
	unsigned flags = 0;
	int active = 1;
	CUdevice dev;

	test_name = "pin-context";
	if (cudadrv_get(&drv, &why) < 0)
		fail("CUDA: %s", why);
	/* No context in this process: pinning must not make one on GPU 0. */
	s = attach_opts(try_kv, NULL);
	if (stoker_pinned(s) || !strstr(stoker_last_error(s), "no CUDA context"))
		fail("without a context: pinned %d (%s)", stoker_pinned(s), stoker_last_error(s));
	stoker_close(s);
	if (drv->cuDeviceGet(&dev, 0) || drv->cuDevicePrimaryCtxGetState(dev, &flags, &active) || active)
		fail("pin_memory left a primary context active on cuda:0");
	/* With the trainer's context current: pinned in it. */
	cuda_init();
	s = attach_opts(req_kv, NULL);
	if (!stoker_pinned(s))
		fail("with a current context: not pinned (%s)", stoker_last_error(s));
	stoker_close(s);
	pass("no context made without one; pinned in the current one");
}

static void test_context_release(void)
{
	struct stoker *s;
	struct stoker_batch *b;
	size_t base, held, now;
	double ring;

	test_name = "context-release";
	cuda_init();
	warm_up_and_settle();
	base = free_memory();
	s = attach("cuda:0", "float32", "1", "0", "1");
	if (stoker_next(s, 60000, &b) < 0)
		fail("next: %s", stoker_last_error(s));
	held = free_memory();
	ring = stat_number("device_bytes", -1, NULL);
	stoker_release(b);
	stoker_close(s);
	wait_device_bytes_zero();
	now = wait_free_memory(base);
	pass("the daemon's context went with its last ring (free memory %zu vs %zu); while held, its context took "
	     "about %.0f MiB beyond the %.0f MiB ring (gpu_memory_budget counts %u MiB)",
	     now, base, ((double)(base - held) - ring) / 1048576.0, ring / 1048576.0, 512u);
}

static void test_refused(const char *device, int want_errno, const char *want_text)
{
	const char *kv[] = {"device", device, "batch_size", "16", "image_size", "64", NULL};
	int err = 0;
	struct stoker *s = attach_opts(kv, &err);

	if (err != -want_errno || !strstr(stoker_last_error(s), want_text))
		fail("%s: attach gave %d (%s); expected -%s with \"%s\"", device, err, stoker_last_error(s),
		     strerror(want_errno), want_text);
	pass("%s refused: %s", device, stoker_last_error(s));
	stoker_close(s);
	/* The daemon serves others. */
	s = attach("cpu", "uint8", "1", "0", "1");
	stoker_close(s);
}

static void test_detect(void)
{
	/* The third: letterbox in rect batches, whose h x w vary per batch and
	 * are smaller than the slots' largest shape. */
	static const char *const transforms[] = {"letterbox", "mosaic", "letterbox"};
	uint8_t *buf = malloc(64u << 20);

	test_name = "detect";
	if (!buf)
		fail("out of memory");
	for (int k = 0; k < 3; k++) {
		const char *rect = k == 2 ? "true" : "false", *shuffle = k == 2 ? "false" : "true";
		const char *dev_kv[] = {"task", "detect", "transform",  transforms[k], "device",     "cuda:0",
					"seed", "9",      "batch_size", "8",           "image_size", "128",
					"rect", rect,     "shuffle",    shuffle,       NULL};
		const char *host_kv[] = {"task", "detect",     "transform", transforms[k], "seed",
					 "9",    "batch_size", "8",         "image_size",  "128",
					 "rect", rect,         "shuffle",   shuffle,       NULL};
		uint32_t shapes = 0, last_h = 0;
		struct stoker *dev = attach_opts(dev_kv, NULL), *host = attach_opts(host_kv, NULL);
		uint64_t batches = 0, boxes = 0;

		for (;;) {
			struct stoker_batch *a, *b;
			const float *ba, *bb;
			uint32_t na = 0, nb = 0;
			int ra = stoker_next(dev, 120000, &a), rb = stoker_next(host, 120000, &b);

			if (ra == -ENODATA && rb == -ENODATA)
				break;
			if (ra < 0 || rb < 0)
				fail("next: %s / %s", stoker_last_error(dev), stoker_last_error(host));
			if (stoker_batch_height(a) != stoker_batch_height(b) ||
			    stoker_batch_width(a) != stoker_batch_width(b))
				fail("%s batch %llu: device batch %ux%u, host %ux%u", transforms[k],
				     (unsigned long long)stoker_batch_index(b), stoker_batch_height(a),
				     stoker_batch_width(a), stoker_batch_height(b), stoker_batch_width(b));
			shapes += stoker_batch_height(b) != last_h;
			last_h = stoker_batch_height(b);
			compare_batch(a, b, buf);
			ba = stoker_batch_boxes(a, &na);
			bb = stoker_batch_boxes(b, &nb);
			if (!ba || !bb || na != nb || memcmp(ba, bb, (size_t)na * 6 * sizeof(float)))
				fail("%s batch %llu: boxes differ (%u vs %u rows)", transforms[k],
				     (unsigned long long)stoker_batch_index(b), na, nb);
			boxes += na;
			batches++;
			stoker_release(a);
			stoker_release(b);
		}
		if (k == 2 && shapes < 2)
			fail("rect: every batch of one height: no rectangular batches seen");
		pass("%s%s: %llu batches, %llu boxes; device images equal to the host's, boxes on the host equal",
		     transforms[k], k == 2 ? " rect" : "", (unsigned long long)batches, (unsigned long long)boxes);
		stoker_close(dev);
		stoker_close(host);
	}
	free(buf);
}

static void test_stats(void)
{
	struct stoker *s;
	struct stoker_batch *b;
	double bytes, total;

	test_name = "stats";
	s = attach("cuda:0", "float32", "2", "0", "1");
	if (stoker_next(s, 60000, &b) < 0)
		fail("next");
	bytes = stat_number(NULL, 0, "device_bytes");
	total = stat_number("device_bytes", -1, NULL);
	/* 4 slots of 16 x 3 x 64 x 64 floats, and the staging buffer. */
	if (bytes < 4.0 * 16 * 3 * 64 * 64 * 4 || total != bytes)
		fail("device_bytes %.0f (daemon %.0f)", bytes, total);
	stoker_release(b);
	stoker_close(s);
	pass("client device_bytes %.0f, daemon %.0f", bytes, total);
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: gpu_check SOCKET DATASET TEST [ARGS]\n");
		return 2;
	}
	sock = argv[1];
	dataset = argv[2];
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(argv[3], "child") && argc == 7) {
		child(argv[4], argv[5], atoi(argv[6]));
	} else if (!strcmp(argv[3], "identity")) {
		cuda_init();
		test_identity();
	} else if (!strcmp(argv[3], "multi")) {
		cuda_init();
		test_multi();
	} else if (!strcmp(argv[3], "kill") && argc == 5) {
		test_kill(argv[0], atoi(argv[4]));
	} else if (!strcmp(argv[3], "daemon-kill") && argc == 5) {
		test_daemon_kill((pid_t)atoi(argv[4]));
	} else if (!strcmp(argv[3], "budget")) {
		test_name = "budget";
		test_refused("cuda:0", ENOMEM, "gpu_memory_budget");
	} else if (!strcmp(argv[3], "nodevice")) {
		test_name = "nodevice";
		test_refused("cuda:99", ENODEV, "cuda:99 does not exist");
	} else if (!strcmp(argv[3], "stats")) {
		test_stats();
	} else if (!strcmp(argv[3], "detect")) {
		cuda_init();
		test_detect();
	} else if (!strcmp(argv[3], "killed-release")) {
		test_killed_release(argv[0]);
	} else if (!strcmp(argv[3], "stuck-child")) {
		stuck_child();
	} else if (!strcmp(argv[3], "close-waits")) {
		test_close_waits();
	} else if (!strcmp(argv[3], "async-error")) {
		cuda_init();
		test_async_error();
	} else if (!strcmp(argv[3], "release-timeout")) {
		cuda_init();
		test_release_timeout();
	} else if (!strcmp(argv[3], "pin-context")) {
		test_pin_context();
	} else if (!strcmp(argv[3], "context-release")) {
		test_context_release();
	} else {
		fprintf(stderr, "gpu_check: unknown test %s\n", argv[3]);
		return 2;
	}
	return 0;
}
