/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cudadrv.h"
#include "gpu.h"
#include "log.h"

#define GPU_MAX_DEVICES 64
#define GPU_SLOT_ALIGN 256 /* device slots start where any tensor may */

enum gpu_op {
	OP_OPEN,   /* loop -> CUDA thread */
	OP_COPY,
	OP_CLOSE,
	OP_FREE,   /* from the stream's last callback */
	OP_OPENED, /* -> loop */
	OP_COPIED,
	OP_FREED,
};

/* A request or a result. Each ring owns its messages (one per slot for
 * copies: a slot has at most one copy in flight), so nothing is allocated
 * per batch. */
struct gpu_msg {
	struct gpu_msg *next;
	enum gpu_op op;
	struct gpu_ring *ring;
	uint32_t slot, count;
	int err;
};

#ifdef STOKER_HAVE_CUDA
struct gpu_device {
	CUdevice dev;
	CUcontext ctx; /* the primary context, retained on first use */
	CUmodule mod;
	CUfunction f32, f16;
	uint8_t uuid[GPU_UUID_BYTES];
	uint64_t bytes; /* device rings on it (CUDA thread) */
	uint32_t rings;
};

struct ring_cuda {
	struct gpu_device *dev;
	CUmemGenericAllocationHandle handle;
	bool has_handle, reserved, mapped, registered, counted;
	CUdeviceptr base, staging;
	size_t size;
	CUstream stream;
	CUevent *ready, *release; /* [slot_count] */
};
#else
struct gpu_device {
	int unused;
};
struct ring_cuda {
	int unused;
};
#endif

struct gpu {
	uv_loop_t *loop;
	uv_async_t async;
	pthread_mutex_t lock; /* guards the two lists and status; a leaf */
	pthread_cond_t cond;
	struct gpu_msg *req_head, *req_tail; /* to the CUDA thread, FIFO */
	struct gpu_msg *done;                /* to the loop, LIFO */
	char status[192];
	bool started, stop;
	pthread_t thread;
	/* CUDA thread only. */
	const struct cudadrv *drv;
	bool enumerated;
	int ndevices;
	struct gpu_device devices[GPU_MAX_DEVICES];
	/* Loop thread only. */
	uint32_t rings;
	bool freeing, finished;
	char status_copy[192];
};

struct gpu_ring {
	struct gpu *g;
	void *owner;
	struct gpu_callbacks cb;
	void (*copied)(void *owner, uint32_t slot, int err);
	void (*closed)(void *owner);
	struct gpu_ring_params p;
	struct devring dr;
	struct gpu_ring_export ex;
	struct gpu_msg open_msg, close_msg, free_msg;
	struct gpu_msg *copy_req, *copy_done; /* [slot_count] */
	uint64_t image_bytes, u8_image_bytes;
	char why[320];
	struct ring_cuda cu; /* CUDA thread only */
};

static void push_request(struct gpu *g, struct gpu_msg *m)
{
	pthread_mutex_lock(&g->lock);
	m->next = NULL;
	if (g->req_tail)
		g->req_tail->next = m;
	else
		g->req_head = m;
	g->req_tail = m;
	pthread_cond_signal(&g->cond);
	pthread_mutex_unlock(&g->lock);
}

/* From the CUDA thread or CUDA's callback thread: no CUDA call here. */
static void push_done(struct gpu *g, struct gpu_msg *m)
{
	pthread_mutex_lock(&g->lock);
	m->next = g->done;
	g->done = m;
	pthread_mutex_unlock(&g->lock);
	uv_async_send(&g->async);
}

static void set_status(struct gpu *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_status(struct gpu *g, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&g->lock);
	va_start(ap, fmt);
	vsnprintf(g->status, sizeof(g->status), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&g->lock);
}

/* ---- the CUDA side (CUDA thread, and the stream's callbacks) ---- */

#ifdef STOKER_HAVE_CUDA
#include "gpu_fatbin.h"

#define CU(fn, ...) CUDADRV_TRY(g->drv, fn, __VA_ARGS__)

static size_t align_up(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

static int cuda_errno(CUresult res)
{
	switch (res) {
	case CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOSPC;
	case CUDA_ERROR_INVALID_DEVICE:
	case CUDA_ERROR_NO_DEVICE:
		return -ENODEV;
	case CUDA_ERROR_NOT_SUPPORTED:
		return -ENOTSUP;
	default:
		return -EIO;
	}
}

static int enumerate(struct gpu *g, char *why, size_t whysize)
{
	const char *reason;
	CUresult res = CUDA_SUCCESS;
	const char *what = "";
	int n = 0, r;

	if (g->enumerated)
		return 0;
	r = cudadrv_get(&g->drv, &reason);
	if (r < 0) {
		snprintf(why, whysize, "%s", reason);
		set_status(g, "%s", reason);
		return r;
	}
	CU(cuDeviceGetCount, &n);
	if (n > GPU_MAX_DEVICES)
		n = GPU_MAX_DEVICES;
	for (int i = 0; i < n; i++) {
		CUuuid u;

		CU(cuDeviceGet, &g->devices[i].dev, i);
		CU(cuDeviceGetUuid, &u, g->devices[i].dev);
		memcpy(g->devices[i].uuid, u.bytes, GPU_UUID_BYTES);
	}
	g->ndevices = n;
	g->enumerated = true;
	set_status(g, "usable: %d GPU%s (driver API %d.%d)", n, n == 1 ? "" : "s", g->drv->version / 1000,
		   g->drv->version % 1000 / 10);
	return 0;
fail:
	snprintf(why, whysize, "CUDA is not usable on this node: %s: %s", what, cudadrv_error(g->drv, res));
	set_status(g, "%s", why);
	return cuda_errno(res);
}

/* The device's context on its first ring, and the conversion kernels on
 * its first float ring: uint8 delivery needs no kernel, so it works even
 * where the driver cannot load this build's fatbin. */
static int device_prepare(struct gpu *g, struct gpu_device *d, bool kernels, char *why, size_t whysize)
{
	CUresult res = CUDA_SUCCESS;
	const char *what = "";
	CUcontext ctx = NULL, popped;
	CUmodule mod = NULL;
	bool pushed = false;

	if (!d->ctx) {
		CU(cuDevicePrimaryCtxRetain, &ctx, d->dev);
		d->ctx = ctx;
	}
	if (!kernels || d->mod)
		return 0;
	CU(cuCtxPushCurrent, d->ctx);
	pushed = true;
	CU(cuModuleLoadData, &mod, gpu_convert_fatbin);
	CU(cuModuleGetFunction, &d->f32, mod, "stoker_convert_f32");
	CU(cuModuleGetFunction, &d->f16, mod, "stoker_convert_f16");
	g->drv->cuCtxPopCurrent(&popped);
	d->mod = mod;
	return 0;
fail:
	snprintf(why, whysize, "cannot use the GPU: %s: %s%s", what, cudadrv_error(g->drv, res),
		 mod || !strcmp(what, "cuModuleLoadData") ? " (the conversion kernels: is the driver older than this "
							     "build's CUDA toolkit? uint8 output needs no kernel)"
							   : "");
	if (mod)
		g->drv->cuModuleUnload(mod);
	if (pushed)
		g->drv->cuCtxPopCurrent(&popped);
	return cuda_errno(res);
}

/* Everything the ring holds on the GPU, whatever part of the setup ran. */
static void ring_teardown(struct gpu_ring *r)
{
	struct gpu *g = r->g;
	struct ring_cuda *c = &r->cu;
	CUcontext popped;

	if (!c->dev)
		return;
	g->drv->cuCtxPushCurrent(c->dev->ctx);
	if (c->registered)
		g->drv->cuMemHostUnregister(r->p.host_base);
	if (c->stream)
		g->drv->cuStreamDestroy(c->stream);
	for (uint32_t i = 0; i < r->p.slot_count; i++) {
		if (c->ready && c->ready[i])
			g->drv->cuEventDestroy(c->ready[i]);
		if (c->release && c->release[i])
			g->drv->cuEventDestroy(c->release[i]);
	}
	if (c->staging)
		g->drv->cuMemFree(c->staging);
	if (c->mapped)
		g->drv->cuMemUnmap(c->base, c->size);
	if (c->reserved)
		g->drv->cuMemAddressFree(c->base, c->size);
	if (c->has_handle)
		g->drv->cuMemRelease(c->handle);
	g->drv->cuCtxPopCurrent(&popped);
	if (c->counted) {
		c->dev->bytes -= r->ex.device_bytes;
		c->dev->rings--;
	}
	free(c->ready);
	free(c->release);
	if (r->ex.fd >= 0)
		close(r->ex.fd);
	r->ex.fd = -1;
	memset(c, 0, sizeof(*c));
}

static int ring_setup(struct gpu_ring *r)
{
	struct gpu *g = r->g;
	struct ring_cuda *c = &r->cu;
	const struct gpu_ring_params *p = &r->p;
	struct gpu_device *d = NULL;
	CUresult res = CUDA_SUCCESS;
	const char *what = "";
	CUmemAllocationProp prop;
	CUmemAccessDesc access;
	CUcontext popped;
	size_t gran = 0, free_bytes = 0, total_bytes = 0, staging_bytes = 0;
	uint64_t slot_bytes, bytes;
	int err, ro = 0, fd = -1;
	bool pushed = false;

	err = enumerate(g, r->why, sizeof(r->why));
	if (err < 0)
		return err;
	if (!p->has_uuid) {
		snprintf(r->why, sizeof(r->why),
			 "%s: the client sent no GPU UUID (it could not resolve the device)", p->device);
		return -ENODEV;
	}
	for (int i = 0; i < g->ndevices; i++)
		if (!memcmp(g->devices[i].uuid, p->uuid, GPU_UUID_BYTES))
			d = &g->devices[i];
	if (!d) {
		snprintf(r->why, sizeof(r->why),
			 "%s: that GPU is not visible to stokerd (it sees %d GPU%s; check the unit's device access and "
			 "CUDA_VISIBLE_DEVICES)",
			 p->device, g->ndevices, g->ndevices == 1 ? "" : "s");
		return -ENODEV;
	}
	err = device_prepare(g, d, p->dtype != DTYPE_UINT8, r->why, sizeof(r->why));
	if (err < 0)
		return err;
	c->dev = d;
	r->ex.fd = -1;
	CU(cuCtxPushCurrent, d->ctx);
	pushed = true;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = (int)d->dev;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	CU(cuMemGetAllocationGranularity, &gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
	slot_bytes = align_up((size_t)p->batch_size * r->image_bytes, GPU_SLOT_ALIGN);
	c->size = align_up((size_t)slot_bytes * p->slot_count, gran ? gran : 1);
	if (p->dtype != DTYPE_UINT8)
		staging_bytes = align_up((size_t)p->batch_size * r->u8_image_bytes, GPU_SLOT_ALIGN) + sizeof(p->lut);
	bytes = c->size + staging_bytes;
	if (p->budget && d->bytes + bytes > p->budget) {
		snprintf(r->why, sizeof(r->why),
			 "a %llu-byte device ring does not fit %s's gpu_memory_budget (%llu bytes): %u clients' device "
			 "rings take %llu there; lower batch_size, image_size or prefetch, or wait",
			 (unsigned long long)bytes, p->device, (unsigned long long)p->budget, d->rings,
			 (unsigned long long)d->bytes);
		err = -ENOSPC;
		goto out;
	}
	CU(cuMemGetInfo, &free_bytes, &total_bytes);
	if (bytes > free_bytes) {
		snprintf(r->why, sizeof(r->why),
			 "a %llu-byte device ring does not fit %s: the GPU has %llu of %llu bytes free; lower "
			 "batch_size, image_size or prefetch",
			 (unsigned long long)bytes, p->device, (unsigned long long)free_bytes,
			 (unsigned long long)total_bytes);
		err = -ENOSPC;
		goto out;
	}
	CU(cuMemCreate, &c->handle, c->size, &prop, 0);
	c->has_handle = true;
	CU(cuMemAddressReserve, &c->base, c->size, gran, 0, 0);
	c->reserved = true;
	CU(cuMemMap, c->base, c->size, 0, c->handle, 0);
	c->mapped = true;
	memset(&access, 0, sizeof(access));
	access.location = prop.location;
	access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	CU(cuMemSetAccess, c->base, c->size, &access, 1);
	CU(cuMemExportToShareableHandle, &fd, c->handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	r->ex.fd = fd;
	if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
		err = -errno;
		snprintf(r->why, sizeof(r->why), "%s: cannot mark the device ring's fd close-on-exec: %s", p->device,
			 strerror(errno));
		goto out;
	}
	if (staging_bytes) {
		CU(cuMemAlloc, &c->staging, staging_bytes);
		CU(cuMemcpyHtoD, c->staging + staging_bytes - sizeof(p->lut), &p->lut, sizeof(p->lut));
	}
	c->ready = calloc(p->slot_count, sizeof(*c->ready));
	c->release = calloc(p->slot_count, sizeof(*c->release));
	r->ex.ready = calloc(p->slot_count, sizeof(*r->ex.ready));
	r->ex.release = calloc(p->slot_count, sizeof(*r->ex.release));
	if (!c->ready || !c->release || !r->ex.ready || !r->ex.release) {
		err = -ENOMEM;
		snprintf(r->why, sizeof(r->why), "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < p->slot_count; i++) {
		CUipcEventHandle h;

		CU(cuEventCreate, &c->ready[i], CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING);
		CU(cuIpcGetEventHandle, &h, c->ready[i]);
		memcpy(r->ex.ready[i], h.reserved, GPU_EVENT_HANDLE_BYTES);
		CU(cuEventCreate, &c->release[i], CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING);
		CU(cuIpcGetEventHandle, &h, c->release[i]);
		memcpy(r->ex.release[i], h.reserved, GPU_EVENT_HANDLE_BYTES);
	}
	CU(cuStreamCreate, &c->stream, CU_STREAM_NON_BLOCKING);
	/* The GPU only reads the host ring: say so where the device can use it. */
	if (g->drv->cuDeviceGetAttribute(&ro, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, d->dev) !=
	    CUDA_SUCCESS)
		ro = 0;
	CU(cuMemHostRegister, p->host_base, p->host_bytes, ro ? CU_MEMHOSTREGISTER_READ_ONLY : 0);
	c->registered = true;
	g->drv->cuCtxPopCurrent(&popped);
	pushed = false;

	r->ex.slot_bytes = slot_bytes;
	r->ex.ring_bytes = c->size;
	r->ex.device_bytes = bytes;
	memcpy(r->ex.uuid, d->uuid, GPU_UUID_BYTES);
	d->bytes += bytes;
	d->rings++;
	c->counted = true;
	return 0;
fail:
	snprintf(r->why, sizeof(r->why), "%s: %s: %s", p->device, what, cudadrv_error(g->drv, res));
	err = cuda_errno(res);
out:
	if (pushed)
		g->drv->cuCtxPopCurrent(&popped);
	ring_teardown(r);
	return err;
}

static void CUDA_CB on_copied(void *arg)
{
	struct gpu_msg *m = arg;

	push_done(m->ring->g, m);
}

static void CUDA_CB on_drained(void *arg)
{
	struct gpu_ring *r = arg;

	r->free_msg.op = OP_FREE;
	push_request(r->g, &r->free_msg);
}

/* Queue slot's copy (and conversion) on the ring's stream, after the
 * client's release of the slot; the stream's callback reports it done. */
static int ring_copy(struct gpu_ring *r, uint32_t slot, uint32_t count)
{
	struct gpu *g = r->g;
	struct ring_cuda *c = &r->cu;
	const struct gpu_ring_params *p = &r->p;
	CUresult res = CUDA_SUCCESS;
	const char *what = "";
	CUcontext popped;
	CUdeviceptr dst = c->base + (CUdeviceptr)slot * r->ex.slot_bytes;
	const uint8_t *src = p->host_base + (size_t)slot * p->host_slot_bytes;
	size_t u8_bytes = (size_t)count * r->u8_image_bytes;
	struct gpu_msg *done = &r->copy_done[slot];
	bool pushed = false;

	CU(cuCtxPushCurrent, c->dev->ctx);
	pushed = true;
	/* A wait on an event never recorded (the slot's first use) is a no-op. */
	CU(cuStreamWaitEvent, c->stream, c->release[slot], 0);
	if (p->dtype == DTYPE_UINT8) {
		CU(cuMemcpyHtoDAsync, dst, src, u8_bytes, c->stream);
	} else {
		unsigned long long plane = (unsigned long long)p->image_size * p->image_size;
		unsigned long long pixels = plane * count;
		size_t staging_bytes = align_up((size_t)p->batch_size * r->u8_image_bytes, GPU_SLOT_ALIGN);
		CUdeviceptr lut = c->staging + staging_bytes;
		void *args[] = {&c->staging, &dst, &lut, &plane, &pixels};
		unsigned blocks = (unsigned)((pixels + 255) / 256 < 65535 ? (pixels + 255) / 256 : 65535);

		CU(cuMemcpyHtoDAsync, c->staging, src, u8_bytes, c->stream);
		CU(cuLaunchKernel, p->dtype == DTYPE_FLOAT16 ? c->dev->f16 : c->dev->f32, blocks, 1, 1, 256, 1, 1, 0,
		   c->stream, args, NULL);
	}
	CU(cuEventRecord, c->ready[slot], c->stream);
	done->op = OP_COPIED;
	done->err = 0;
	CU(cuLaunchHostFunc, c->stream, on_copied, done);
	g->drv->cuCtxPopCurrent(&popped);
	return 0;
fail:
	log_error("%s: cannot queue a copy into device slot %u: %s: %s", p->device, slot, what,
		  cudadrv_error(g->drv, res));
	if (pushed)
		g->drv->cuCtxPopCurrent(&popped);
	return cuda_errno(res);
}

/* After everything queued on the stream so far, free the ring (OP_FREE). */
static int ring_drain(struct gpu_ring *r)
{
	struct gpu *g = r->g;
	CUcontext popped;
	CUresult res;

	if (!r->cu.stream)
		return -EINVAL;
	if (g->drv->cuCtxPushCurrent(r->cu.dev->ctx) != CUDA_SUCCESS)
		return -EIO;
	res = g->drv->cuLaunchHostFunc(r->cu.stream, on_drained, r);
	g->drv->cuCtxPopCurrent(&popped);
	return res == CUDA_SUCCESS ? 0 : -EIO;
}
#else
static int ring_setup(struct gpu_ring *r)
{
	const char *why = "";
	const struct cudadrv *drv;
	int err = cudadrv_get(&drv, &why);

	snprintf(r->why, sizeof(r->why), "%s", why);
	set_status(r->g, "%s", why);
	return err < 0 ? err : -ENOSYS;
}

static int ring_copy(struct gpu_ring *r, uint32_t slot, uint32_t count)
{
	return -ENOSYS;
}

static int ring_drain(struct gpu_ring *r)
{
	return -ENOSYS;
}

static void ring_teardown(struct gpu_ring *r)
{
}
#endif

static void handle_request(struct gpu *g, struct gpu_msg *m)
{
	struct gpu_ring *r = m->ring;

	switch (m->op) {
	case OP_OPEN:
		r->open_msg.err = ring_setup(r);
		r->open_msg.op = OP_OPENED;
		push_done(g, &r->open_msg);
		break;
	case OP_COPY: {
		int err = ring_copy(r, m->slot, m->count);

		if (err < 0) {
			r->copy_done[m->slot].op = OP_COPIED;
			r->copy_done[m->slot].err = err;
			push_done(g, &r->copy_done[m->slot]);
		}
		break;
	}
	case OP_CLOSE:
		/* Free once the stream has run what was queued; a stream that
		 * cannot take the callback has nothing left to run. */
		if (ring_drain(r) < 0) {
			ring_teardown(r);
			r->free_msg.op = OP_FREED;
			push_done(g, &r->free_msg);
		}
		break;
	case OP_FREE:
		ring_teardown(r);
		r->free_msg.op = OP_FREED;
		push_done(g, &r->free_msg);
		break;
	default:
		break;
	}
}

static void *gpu_thread(void *arg)
{
	struct gpu *g = arg;

	pthread_mutex_lock(&g->lock);
	for (;;) {
		struct gpu_msg *m;

		while (!g->req_head && !g->stop)
			pthread_cond_wait(&g->cond, &g->lock);
		if (!g->req_head)
			break;
		m = g->req_head;
		g->req_head = m->next;
		if (!g->req_head)
			g->req_tail = NULL;
		pthread_mutex_unlock(&g->lock);
		handle_request(g, m);
		pthread_mutex_lock(&g->lock);
	}
	pthread_mutex_unlock(&g->lock);
	return NULL;
}

/* ---- the loop side ---- */

static void gpu_ring_free(struct gpu_ring *r)
{
	struct gpu *g = r->g;

	devring_release_state(&r->dr);
	free(r->ex.ready);
	free(r->ex.release);
	if (r->ex.fd >= 0)
		close(r->ex.fd);
	free(r->copy_req);
	free(r->copy_done);
	free(r);
	g->rings--;
}

static void gpu_finish(struct gpu *g);

static void on_async(uv_async_t *h)
{
	struct gpu *g = h->data;
	struct gpu_msg *list, *rev = NULL;

	pthread_mutex_lock(&g->lock);
	list = g->done;
	g->done = NULL;
	pthread_mutex_unlock(&g->lock);
	while (list) { /* into completion order */
		struct gpu_msg *next = list->next;

		list->next = rev;
		rev = list;
		list = next;
	}
	while (rev) {
		struct gpu_msg *m = rev;
		struct gpu_ring *r = m->ring;

		rev = m->next;
		switch (m->op) {
		case OP_OPENED:
			if (m->err < 0) {
				r->cb.opened(r->owner, NULL, m->err, r->why);
				gpu_ring_free(r);
			} else {
				r->cb.opened(r->owner, r, 0, NULL);
			}
			break;
		case OP_COPIED:
			devring_copied(&r->dr, m->slot, m->err);
			if (r->copied)
				r->copied(r->owner, m->slot, m->err);
			break;
		case OP_FREED:
			devring_closed(&r->dr);
			if (r->closed)
				r->closed(r->owner);
			gpu_ring_free(r);
			break;
		default:
			break;
		}
	}
	if (g->freeing && g->rings == 0)
		gpu_finish(g);
}

static int submit_copy(void *backend, uint32_t slot, uint32_t count)
{
	struct gpu_ring *r = backend;
	struct gpu_msg *m = &r->copy_req[slot];

	m->op = OP_COPY;
	m->slot = slot;
	m->count = count;
	push_request(r->g, m);
	return 0;
}

static void submit_close(void *backend)
{
	struct gpu_ring *r = backend;

	r->close_msg.op = OP_CLOSE;
	push_request(r->g, &r->close_msg);
}

static const struct devring_ops gpu_devring_ops = {
	.submit = submit_copy,
	.close = submit_close,
};

int gpu_new(uv_loop_t *loop, struct gpu **out)
{
	struct gpu *g = calloc(1, sizeof(*g));
	int r;

	if (!g)
		return -ENOMEM;
	g->loop = loop;
	snprintf(g->status, sizeof(g->status), "unused");
	r = -pthread_mutex_init(&g->lock, NULL);
	if (r < 0)
		goto fail;
	r = -pthread_cond_init(&g->cond, NULL);
	if (r < 0)
		goto fail_mutex;
	r = uv_async_init(loop, &g->async, on_async);
	if (r < 0)
		goto fail_cond;
	g->async.data = g;
	/* Never what keeps the loop running: at a stop, a ring whose stream
	 * never drains (a client's release event that never fires) must not
	 * hold the daemon up; the process exit frees it. */
	uv_unref((uv_handle_t *)&g->async);
	*out = g;
	return 0;
fail_cond:
	pthread_cond_destroy(&g->cond);
fail_mutex:
	pthread_mutex_destroy(&g->lock);
fail:
	free(g);
	return r;
}

static void on_async_closed(uv_handle_t *h)
{
	struct gpu *g = h->data;

	pthread_cond_destroy(&g->cond);
	pthread_mutex_destroy(&g->lock);
	free(g);
}

/* Every ring is gone: end the thread, close the handle. */
static void gpu_finish(struct gpu *g)
{
	if (g->finished)
		return;
	g->finished = true;
	if (g->started) {
		pthread_mutex_lock(&g->lock);
		g->stop = true;
		pthread_cond_signal(&g->cond);
		pthread_mutex_unlock(&g->lock);
		pthread_join(g->thread, NULL);
		g->started = false;
	}
	uv_close((uv_handle_t *)&g->async, on_async_closed);
}

void gpu_free(struct gpu *g)
{
	if (!g || g->freeing)
		return;
	g->freeing = true;
	/* Rings still closing finish first (their streams may reach the host
	 * ring); if one never does, the process exits without waiting. */
	if (g->rings == 0)
		gpu_finish(g);
}

const char *gpu_status(const struct gpu *g)
{
	struct gpu *m = (struct gpu *)g;

	if (!g)
		return "unused";
	pthread_mutex_lock(&m->lock);
	memcpy(m->status_copy, m->status, sizeof(m->status_copy));
	pthread_mutex_unlock(&m->lock);
	return m->status_copy;
}

int gpu_ring_open(struct gpu *g, const struct gpu_ring_params *p, const struct gpu_callbacks *cb, void *owner)
{
	struct gpu_ring *r;
	int err;

	if (g->freeing)
		return -ESHUTDOWN;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->g = g;
	r->owner = owner;
	r->cb = *cb;
	r->p = *p;
	r->ex.fd = -1;
	r->u8_image_bytes = (uint64_t)p->image_size * p->image_size * 3;
	r->image_bytes = r->u8_image_bytes * sample_dtype_bytes(p->dtype);
	r->copy_req = calloc(p->slot_count, sizeof(*r->copy_req));
	r->copy_done = calloc(p->slot_count, sizeof(*r->copy_done));
	if (!r->copy_req || !r->copy_done) {
		err = -ENOMEM;
		goto fail;
	}
	err = devring_init(&r->dr, p->slot_count, &gpu_devring_ops, r);
	if (err < 0)
		goto fail;
	for (uint32_t i = 0; i < p->slot_count; i++) {
		r->copy_req[i].ring = r->copy_done[i].ring = r;
		r->copy_done[i].slot = i;
	}
	r->open_msg.ring = r->close_msg.ring = r->free_msg.ring = r;
	if (!g->started) {
		err = -pthread_create(&g->thread, NULL, gpu_thread, g);
		if (err < 0)
			goto fail;
		g->started = true;
	}
	g->rings++;
	r->open_msg.op = OP_OPEN;
	push_request(g, &r->open_msg);
	return 0;
fail:
	devring_release_state(&r->dr);
	free(r->copy_req);
	free(r->copy_done);
	free(r);
	return err;
}

struct devring *gpu_ring_devring(struct gpu_ring *r)
{
	return &r->dr;
}

void gpu_ring_set_handlers(struct gpu_ring *r, void (*copied)(void *owner, uint32_t slot, int err),
			   void (*closed)(void *owner))
{
	r->copied = copied;
	r->closed = closed;
}

struct gpu_ring_export *gpu_ring_export(struct gpu_ring *r)
{
	return &r->ex;
}

uint64_t gpu_ring_bytes(const struct gpu_ring *r)
{
	return r ? r->ex.device_bytes : 0;
}
