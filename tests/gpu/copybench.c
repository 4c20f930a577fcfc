/* SPDX-License-Identifier: MIT */
/*
 * gpu_copybench: the daemon's device path (daemon/gpu/gpu.c: its CUDA thread,
 * the ring's stream with its event waits, the host callbacks back to the
 * loop, devring's slot logic) moving batches from a page-locked host ring
 * into a device ring, against plain cuMemcpyHtoDAsync from pinned memory of
 * the same size in the same process (what cudaMemcpy from pinned memory
 * does). A measurement, printed as one JSON line; tests/gpu/run.sh runs it.
 *
 *   gpu_copybench DTYPE [SECONDS]     DTYPE: uint8 | float32 | float16
 *
 * uint8 moves the batch as is; the float types copy uint8 and convert on
 * the GPU (the same bytes over PCIe, plus the kernel).
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "augment.h"
#include "cudadrv.h"
#include "gpu.h"
#include "ring.h"

#define SLOTS 5
#define BATCH 256
#define SIDE 224

struct bench {
	struct gpu_ring *ring;
	struct devring *dr;
	double deadline, start, end;
	uint64_t batches, bytes_per_batch;
	uint32_t in_flight;
	int err;
	char why[320];
};

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void on_closed(void *owner)
{
	uv_stop(uv_default_loop());
}

/* A copy is back: the "client" takes it and gives it back at once; the
 * slot goes round again until the time is up. */
static void on_copied(void *owner, uint32_t slot, int err)
{
	struct bench *b = owner;

	b->in_flight--;
	if (err < 0) {
		b->err = err;
	} else {
		b->batches++;
		devring_deliver(b->dr, slot);
		devring_release(b->dr, slot);
	}
	if (!b->err && now() < b->deadline && devring_submit(b->dr, slot, BATCH) == 0) {
		b->in_flight++;
		return;
	}
	if (b->in_flight == 0) {
		b->end = now();
		devring_close(b->dr);
	}
}

static void on_opened(void *owner, struct gpu_ring *r, int err, const char *why)
{
	struct bench *b = owner;

	if (!r) {
		b->err = err;
		snprintf(b->why, sizeof(b->why), "%s", why);
		uv_stop(uv_default_loop());
		return;
	}
	b->ring = r;
	b->dr = gpu_ring_devring(r);
	gpu_ring_set_handlers(r, on_copied, on_closed);
	b->start = now();
	b->deadline += b->start;
	for (uint32_t s = 0; s < SLOTS; s++)
		if (devring_submit(b->dr, s, BATCH) == 0)
			b->in_flight++;
}

/* cuMemcpyHtoDAsync from pinned memory, the same batches, back to back. */
static double pinned_baseline(const struct cudadrv *drv, size_t bytes, double seconds)
{
	CUresult (*alloc_host)(void **, size_t) = (CUresult(*)(void **, size_t))dlsym(drv->lib, "cuMemAllocHost_v2");
	CUresult (*free_host)(void *) = (CUresult(*)(void *))dlsym(drv->lib, "cuMemFreeHost");
	CUresult (*sync)(CUstream) = (CUresult(*)(CUstream))dlsym(drv->lib, "cuStreamSynchronize");
	CUcontext ctx, popped;
	CUdevice dev;
	CUdeviceptr d;
	CUstream st;
	void *h;
	double t0, t1;
	uint64_t n = 0;

	if (!alloc_host || !free_host || !sync || drv->cuDeviceGet(&dev, 0) ||
	    drv->cuDevicePrimaryCtxRetain(&ctx, dev) || drv->cuCtxPushCurrent(ctx) || alloc_host(&h, bytes) ||
	    drv->cuMemAlloc(&d, bytes) || drv->cuStreamCreate(&st, CU_STREAM_NON_BLOCKING))
		return -1;
	memset(h, 7, bytes);
	t0 = now();
	do {
		for (int i = 0; i < 8; i++)
			drv->cuMemcpyHtoDAsync(d, h, bytes, st);
		n += 8;
		sync(st);
		t1 = now();
	} while (t1 - t0 < seconds);
	drv->cuStreamDestroy(st);
	drv->cuMemFree(d);
	free_host(h);
	drv->cuCtxPopCurrent(&popped);
	return (double)n * (double)bytes / (t1 - t0);
}

int main(int argc, char **argv)
{
	struct transform_spec spec = {.kind = TRANSFORM_CENTER_CROP,
				      .image_size = SIDE,
				      .mean = {0.485f, 0.456f, 0.406f},
				      .std = {0.229f, 0.224f, 0.225f}};
	struct gpu_ring_params p;
	struct gpu_callbacks cb = {.opened = on_opened};
	struct bench b = {0};
	const struct cudadrv *drv;
	struct ring *host;
	struct gpu *g;
	const char *why;
	CUdevice dev;
	CUuuid u;
	double seconds = argc > 2 ? atof(argv[2]) : 5.0, base, rate;

	if (argc < 2 || (strcmp(argv[1], "uint8") && strcmp(argv[1], "float32") && strcmp(argv[1], "float16"))) {
		fprintf(stderr, "usage: gpu_copybench uint8|float32|float16 [SECONDS]\n");
		return 2;
	}
	spec.dtype = !strcmp(argv[1], "uint8")     ? DTYPE_UINT8
		     : !strcmp(argv[1], "float32") ? DTYPE_FLOAT32
						   : DTYPE_FLOAT16;
	if (cudadrv_get(&drv, &why) < 0 || drv->cuDeviceGet(&dev, 0) || drv->cuDeviceGetUuid(&u, dev)) {
		fprintf(stderr, "gpu_copybench: CUDA: %s\n", why ? why : "no device 0");
		return 1;
	}
	b.bytes_per_batch = (uint64_t)BATCH * SIDE * SIDE * 3;
	if (ring_create(SLOTS, (b.bytes_per_batch + 4095) / 4096 * 4096, &host) < 0)
		return 1;
	memset(host->base, 3, host->bytes);
	memset(&p, 0, sizeof(p));
	snprintf(p.device, sizeof(p.device), "cuda:0");
	memcpy(p.uuid, u.bytes, sizeof(p.uuid));
	p.has_uuid = true;
	p.slot_count = SLOTS;
	p.batch_size = BATCH;
	p.image_size = SIDE;
	p.dtype = spec.dtype;
	if (spec.dtype != DTYPE_UINT8)
		transform_lut_build(&spec, &p.lut);
	p.host_base = host->base;
	p.host_bytes = host->bytes;
	p.host_slot_bytes = host->slot_bytes;
	b.deadline = seconds;
	if (gpu_new(uv_default_loop(), &g) < 0 || gpu_ring_open(g, &p, &cb, &b) < 0)
		return 1;
	uv_run(uv_default_loop(), UV_RUN_DEFAULT);
	if (b.err) {
		fprintf(stderr, "gpu_copybench: %s (%s)\n", b.why, strerror(-b.err));
		return 1;
	}
	gpu_free(g);
	uv_run(uv_default_loop(), UV_RUN_DEFAULT);
	rate = (double)b.batches * (double)b.bytes_per_batch / (b.end - b.start);
	base = pinned_baseline(drv, b.bytes_per_batch, seconds);
	printf("{\"dtype\": \"%s\", \"batch_bytes\": %llu, \"batches\": %llu, \"stoker_GBps\": %.3f, "
	       "\"pinned_memcpy_GBps\": %.3f, \"ratio\": %.3f}\n",
	       argv[1], (unsigned long long)b.bytes_per_batch, (unsigned long long)b.batches, rate / 1e9, base / 1e9,
	       base > 0 ? rate / base : 0.0);
	ring_free(host);
	return 0;
}
