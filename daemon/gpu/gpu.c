/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "cudadrv.h"
#include "gpu.h"
#include "gpuwatch.h"
#include "log.h"

#define GPU_MAX_DEVICES 64
#define GPU_SLOT_ALIGN 256 /* device slots start where any tensor may */
/* What a GPU's primary context holds (its own allocations, the module),
 * counted in gpu_memory_budget while stokerd keeps one there: no process
 * can measure its own context's share without NVML, so an estimate on the
 * high side of what CUDA 12/13 contexts take with lazy module loading. */
#define GPU_CONTEXT_BYTES (512ull << 20)
#define GPU_WATCH_PERIOD_NS 1000000000ull

enum gpu_op {
	OP_OPEN, /* loop -> CUDA thread (again for each step of the setup) */
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
	uint64_t target; /* OP_COPY: the slot's release word must reach it */
	int err;
};

#ifdef STOKER_HAVE_CUDA
struct gpu_device {
	CUdevice dev;
	CUcontext ctx; /* the primary context, retained while it has rings */
	CUmodule mod;
	CUfunction f32, f16;
	uint8_t uuid[GPU_UUID_BYTES];
	uint64_t bytes; /* device rings on it, and the context while held (CUDA thread) */
	uint32_t rings;
};

struct ring_cuda {
	struct gpu_device *dev;
	CUmemGenericAllocationHandle handle;
	bool has_handle, reserved, mapped, words_registered, counted, listed, draining;
	uint32_t slots_registered; /* host slots page-locked so far */
	int step;                  /* the setup's next step */
	CUdeviceptr base, staging, words;
	size_t size, staging_bytes;
	CUstream stream;
	struct gpu_ring *next; /* the CUDA thread's list of set-up rings */
	struct gpuwatch_state watch;
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
	struct gpu_ring *watched; /* rings set up (ring_cuda.next) */
	uint64_t watch_at_ns;
	struct gpuwatch_policy watch;
	bool fault_once; /* tests/gpu: the next float copy's kernel writes out of bounds */
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
	/* A copy's completion is claimed once, by its callback or the watchdog. */
	atomic_bool *pending; /* [slot_count] */
	atomic_bool drain_claimed;
	uint64_t *queued_ns, *target; /* [slot_count]: CUDA thread */
	uint64_t *words;              /* [slot_count]: the release words, mapped from words_fd */
	size_t words_bytes;
	int words_fd;
	uint64_t image_bytes, u8_image_bytes;
	char why[320];
	char failure[320];   /* CUDA thread writes it before failing copies; the loop reads it after */
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
	case CUDA_ERROR_OUT_OF_MEMORY: return -ENOSPC;
	case CUDA_ERROR_INVALID_DEVICE:
	case CUDA_ERROR_NO_DEVICE: return -ENODEV;
	case CUDA_ERROR_NOT_SUPPORTED: return -ENOTSUP;
	default: return -EIO;
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
	/* A failure is not kept: cudadrv_get tries again after a back-off. */
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

/* The device's context on its first ring (counted in its bytes), and the
 * conversion kernels on its first float ring: uint8 delivery needs no
 * kernel, so it works even where the driver cannot load this build's
 * fatbin. */
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
		d->bytes += GPU_CONTEXT_BYTES;
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
							    "build's CUDA toolkit, or the GPU older than Turing? "
							    "uint8 output needs no kernel)"
							  : "");
	if (mod)
		g->drv->cuModuleUnload(mod);
	if (pushed)
		g->drv->cuCtxPopCurrent(&popped);
	return cuda_errno(res);
}

/* The device's last ring is gone: give its context back (under
 * EXCLUSIVE_PROCESS-like sharing a context nobody uses must not linger,
 * and a context a GPU error broke is replaced by the next retain). */
static void device_release(struct gpu *g, struct gpu_device *d)
{
	CUcontext popped;

	if (d->rings || !d->ctx)
		return;
	if (d->mod && g->drv->cuCtxPushCurrent(d->ctx) == CUDA_SUCCESS) {
		g->drv->cuModuleUnload(d->mod);
		g->drv->cuCtxPopCurrent(&popped);
	}
	d->mod = NULL;
	d->f32 = d->f16 = NULL;
	g->drv->cuDevicePrimaryCtxRelease(d->dev);
	d->ctx = NULL;
	d->bytes -= GPU_CONTEXT_BYTES;
}

static void watch_unlist(struct gpu *g, struct gpu_ring *r)
{
	struct gpu_ring **p = &g->watched;

	if (!r->cu.listed)
		return;
	while (*p && *p != r)
		p = &(*p)->cu.next;
	if (*p)
		*p = r->cu.next;
	r->cu.listed = false;
}

/* Everything the ring holds on the GPU, whatever part of the setup ran. */
static void ring_teardown(struct gpu_ring *r)
{
	struct gpu *g = r->g;
	struct ring_cuda *c = &r->cu;
	struct gpu_device *d = c->dev;
	CUcontext popped;

	watch_unlist(g, r);
	if (!d)
		goto out;
	if (d->ctx && g->drv->cuCtxPushCurrent(d->ctx) == CUDA_SUCCESS) {
		for (uint32_t i = 0; i < c->slots_registered; i++)
			g->drv->cuMemHostUnregister(r->p.host_base + (size_t)i * r->p.host_slot_bytes);
		if (c->words_registered)
			g->drv->cuMemHostUnregister(r->words);
		/* Stream-ordered: a cuMemFree here could wait for every stream on
		 * the GPU, other clients' among them. */
		if (c->staging && c->stream)
			g->drv->cuMemFreeAsync(c->staging, c->stream);
		if (c->stream)
			g->drv->cuStreamDestroy(c->stream);
		if (c->mapped)
			g->drv->cuMemUnmap(c->base, c->size);
		if (c->reserved)
			g->drv->cuMemAddressFree(c->base, c->size);
		if (c->has_handle)
			g->drv->cuMemRelease(c->handle);
		g->drv->cuCtxPopCurrent(&popped);
	}
	if (c->counted) {
		d->bytes -= r->ex.device_bytes;
		d->rings--;
	}
	device_release(g, d);
out:
	if (r->ex.fd >= 0)
		close(r->ex.fd);
	r->ex.fd = -1;
	memset(c, 0, sizeof(*c));
}

/* Which of the node's GPUs, and whether it serves a device ring. */
static int setup_device(struct gpu_ring *r)
{
	struct gpu *g = r->g;
	const struct gpu_ring_params *p = &r->p;
	struct gpu_device *d = NULL;
	char why[256];
	int err;

	err = enumerate(g, r->why, sizeof(r->why));
	if (err < 0)
		return err;
	if (!p->has_uuid) {
		snprintf(r->why, sizeof(r->why), "%s: the client sent no GPU UUID (it could not resolve the device)",
			 p->device);
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
	/* Before anything is created there: compute mode and capabilities. */
	err = cudadrv_check_device(g->drv, d->dev,
				   CUDADRV_NEED_RING | CUDADRV_NEED_SHARE |
					   (p->dtype != DTYPE_UINT8 ? CUDADRV_NEED_POOLS : 0),
				   why, sizeof(why));
	if (err < 0) {
		snprintf(r->why, sizeof(r->why), "%s: %s", p->device, why);
		return err == -EPERM ? -ENODEV : err;
	}
	r->cu.dev = d;
	return 0;
}

/* Step 0: the device, its context and kernels, the budget (the context
 * counted in it). */
static int setup_budget(struct gpu_ring *r)
{
	struct gpu *g = r->g;
	struct ring_cuda *c = &r->cu;
	const struct gpu_ring_params *p = &r->p;
	struct gpu_device *d;
	CUresult res = CUDA_SUCCESS;
	const char *what = "";
	CUmemAllocationProp prop;
	CUcontext popped;
	size_t gran = 0, free_bytes = 0, total_bytes = 0;
	uint64_t slot_bytes, bytes;
	bool pushed = false;
	int err;

	err = setup_device(r);
	if (err < 0)
		return err;
	d = c->dev;
	/* The context (counted in d->bytes from now on) and kernels. */
	err = device_prepare(g, d, p->dtype != DTYPE_UINT8, r->why, sizeof(r->why));
	if (err < 0) {
		c->dev = NULL;
		device_release(g, d);
		return err;
	}
	CU(cuCtxPushCurrent, d->ctx);
	pushed = true;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = (int)d->dev;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	CU(cuMemGetAllocationGranularity, &gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
	CU(cuMemGetInfo, &free_bytes, &total_bytes);
	g->drv->cuCtxPopCurrent(&popped);
	pushed = false;
	slot_bytes = align_up((size_t)p->batch_size * r->image_bytes, GPU_SLOT_ALIGN);
	c->size = align_up((size_t)slot_bytes * p->slot_count, gran ? gran : 1);
	if (p->dtype != DTYPE_UINT8)
		c->staging_bytes = align_up((size_t)p->batch_size * r->u8_image_bytes, GPU_SLOT_ALIGN) + sizeof(p->lut);
	bytes = c->size + c->staging_bytes;
	if (p->budget && d->bytes + bytes > p->budget) {
		snprintf(r->why, sizeof(r->why),
			 "a %llu-byte device ring does not fit %s's gpu_memory_budget (%llu bytes): %u clients' device "
			 "rings and stokerd's CUDA context (%llu bytes) take %llu there; lower batch_size, image_size "
			 "or prefetch, or wait",
			 (unsigned long long)bytes, p->device, (unsigned long long)p->budget, d->rings,
			 (unsigned long long)GPU_CONTEXT_BYTES, (unsigned long long)d->bytes);
		err = -ENOSPC;
		goto out;
	}
	if (bytes > free_bytes) {
		snprintf(r->why, sizeof(r->why),
			 "a %llu-byte device ring does not fit %s: the GPU has %llu of %llu bytes free; lower "
			 "batch_size, image_size or prefetch",
			 (unsigned long long)bytes, p->device, (unsigned long long)free_bytes,
			 (unsigned long long)total_bytes);
		err = -ENOSPC;
		goto out;
	}
	/* Counted from now on, so that rings set up step by step side by side
	 * cannot both pass the budget. */
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
	ring_teardown(r); /* the context too, if this was its only ring */
	return err;
}

/* Step 1: the allocation (exported), the stream, the release words, the
 * staging buffer and table. */
static int setup_memory(struct gpu_ring *r)
{
	struct gpu *g = r->g;
	struct ring_cuda *c = &r->cu;
	const struct gpu_ring_params *p = &r->p;
	CUresult res = CUDA_SUCCESS;
	const char *what = "";
	CUmemAllocationProp prop;
	CUmemAccessDesc access;
	CUcontext popped;
	size_t gran = 0;
	int err, fd = -1;
	bool pushed = false;

	CU(cuCtxPushCurrent, c->dev->ctx);
	pushed = true;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = (int)c->dev->dev;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	CU(cuMemGetAllocationGranularity, &gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
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
	CU(cuStreamCreate, &c->stream, CU_STREAM_NON_BLOCKING);
	/* The release words: the client writes them, the stream waits on them. */
	CU(cuMemHostRegister, r->words, r->words_bytes, CU_MEMHOSTREGISTER_DEVICEMAP);
	c->words_registered = true;
	CU(cuMemHostGetDevicePointer, &c->words, r->words, 0);
	if (c->staging_bytes) {
		CU(cuMemAllocAsync, &c->staging, c->staging_bytes, c->stream);
		CU(cuMemcpyHtoDAsync, c->staging + c->staging_bytes - sizeof(p->lut), &p->lut, sizeof(p->lut),
		   c->stream);
	}
	g->drv->cuCtxPopCurrent(&popped);
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

/* Steps 2..: page-lock one host slot (a large ring's registration is slow:
 * one slot a step, other clients' copies in between). */
static int setup_host_slot(struct gpu_ring *r, uint32_t slot)
{
	struct gpu *g = r->g;
	struct ring_cuda *c = &r->cu;
	const struct gpu_ring_params *p = &r->p;
	CUcontext popped;
	CUresult res;
	int ro = 0, err;

	if (g->drv->cuCtxPushCurrent(c->dev->ctx) != CUDA_SUCCESS) {
		snprintf(r->why, sizeof(r->why), "%s: cannot use the GPU's context", p->device);
		ring_teardown(r);
		return -EIO;
	}
	/* The GPU only reads the host ring: say so where the device can use it. */
	if (g->drv->cuDeviceGetAttribute(&ro, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, c->dev->dev) !=
	    CUDA_SUCCESS)
		ro = 0;
	res = g->drv->cuMemHostRegister(p->host_base + (size_t)slot * p->host_slot_bytes, p->host_slot_bytes,
					ro ? CU_MEMHOSTREGISTER_READ_ONLY : 0);
	g->drv->cuCtxPopCurrent(&popped);
	if (res != CUDA_SUCCESS) {
		snprintf(r->why, sizeof(r->why), "%s: cuMemHostRegister of host slot %u: %s", p->device, slot,
			 cudadrv_error(g->drv, res));
		err = cuda_errno(res);
		ring_teardown(r);
		return err;
	}
	c->slots_registered++;
	return 0;
}

/* One step of the setup; *done once the ring is ready. */
static int ring_setup_step(struct gpu_ring *r, bool *done)
{
	struct ring_cuda *c = &r->cu;
	int step = c->step, err;

	*done = false;
	if (step == 0)
		err = setup_budget(r);
	else if (step == 1)
		err = setup_memory(r);
	else
		err = setup_host_slot(r, (uint32_t)(step - 2));
	if (err < 0)
		return err;
	c->step = step + 1;
	if (c->step == 2 + (int)r->p.slot_count) {
		*done = true;
		c->next = r->g->watched;
		r->g->watched = r;
		c->listed = true;
	}
	return 0;
}

/* Complete slot's copy with `err` unless its callback already did. */
static void copy_finish(struct gpu_ring *r, uint32_t slot, int err)
{
	struct gpu_msg *done = &r->copy_done[slot];

	if (!atomic_exchange(&r->pending[slot], false))
		return;
	done->op = OP_COPIED;
	done->err = err;
	push_done(r->g, done);
}

static void CUDA_CB on_copied(void *arg)
{
	struct gpu_msg *m = arg;

	copy_finish(m->ring, m->slot, 0);
}

static void CUDA_CB on_drained(void *arg)
{
	struct gpu_ring *r = arg;

	if (atomic_exchange(&r->drain_claimed, true))
		return;
	r->free_msg.op = OP_FREE;
	push_request(r->g, &r->free_msg);
}

/* Queue slot's copy (and conversion) on the ring's stream, after the
 * client's release of the slot (its release word reaching `target`); the
 * stream's callback reports it done. */
static int ring_copy(struct gpu_ring *r, uint32_t slot, uint32_t count, uint64_t target)
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
	bool pushed = false;

	CU(cuCtxPushCurrent, c->dev->ctx);
	pushed = true;
	CU(cuStreamWaitValue64, c->stream, c->words + (CUdeviceptr)slot * sizeof(uint64_t), target,
	   CU_STREAM_WAIT_VALUE_GEQ);
	if (p->dtype == DTYPE_UINT8) {
		CU(cuMemcpyHtoDAsync, dst, src, u8_bytes, c->stream);
	} else {
		unsigned long long plane = (unsigned long long)p->image_size * p->image_size;
		unsigned long long pixels = plane * count;
		CUdeviceptr lut = c->staging + c->staging_bytes - sizeof(p->lut);
		CUdeviceptr bad = 8;
		void *args[] = {&c->staging, g->fault_once ? &bad : &dst, &lut, &plane, &pixels};
		unsigned blocks = (unsigned)((pixels + 255) / 256 < 65535 ? (pixels + 255) / 256 : 65535);

		CU(cuMemcpyHtoDAsync, c->staging, src, u8_bytes, c->stream);
		CU(cuLaunchKernel, p->dtype == DTYPE_FLOAT16 ? c->dev->f16 : c->dev->f32, blocks, 1, 1, 256, 1, 1, 0,
		   c->stream, args, NULL);
		g->fault_once = false;
	}
	r->queued_ns[slot] = monotonic_ns();
	r->target[slot] = target;
	atomic_store(&r->pending[slot], true);
	res = g->drv->cuLaunchHostFunc(c->stream, on_copied, &r->copy_done[slot]);
	if (res != CUDA_SUCCESS) {
		atomic_store(&r->pending[slot], false);
		what = "cuLaunchHostFunc";
		goto fail;
	}
	g->drv->cuCtxPopCurrent(&popped);
	return 0;
fail:
	log_error("%s: cannot queue a copy into device slot %u: %s: %s", p->device, slot, what,
		  cudadrv_error(g->drv, res));
	snprintf(r->failure, sizeof(r->failure), "%s: %s", what, cudadrv_error(g->drv, res));
	if (pushed)
		g->drv->cuCtxPopCurrent(&popped);
	return cuda_errno(res);
}

/* After everything queued on the stream so far, free the staging buffer
 * (stream-ordered) and the ring (OP_FREE). */
static int ring_drain(struct gpu_ring *r)
{
	struct gpu *g = r->g;
	struct ring_cuda *c = &r->cu;
	CUcontext popped;
	CUresult res;

	if (!c->stream)
		return -EINVAL;
	if (g->drv->cuCtxPushCurrent(c->dev->ctx) != CUDA_SUCCESS)
		return -EIO;
	if (c->staging && g->drv->cuMemFreeAsync(c->staging, c->stream) == CUDA_SUCCESS)
		c->staging = 0;
	res = g->drv->cuLaunchHostFunc(c->stream, on_drained, r);
	g->drv->cuCtxPopCurrent(&popped);
	if (res != CUDA_SUCCESS)
		return -EIO;
	c->draining = true;
	return 0;
}

/* The watchdog: look at each ring with a copy (or its drain) outstanding
 * too long, act on gpuwatch's verdict. */
static void watch_ring(struct gpu *g, struct gpu_ring *r, uint64_t now)
{
	struct ring_cuda *c = &r->cu;
	const struct gpuwatch_policy *pol = &g->watch;
	struct gpuwatch_obs o = {.now_ns = now};
	enum gpuwatch_verdict v;
	uint32_t oldest = 0;
	CUcontext popped;
	CUresult res = CUDA_ERROR_INVALID_CONTEXT;

	for (uint32_t i = 0; i < r->p.slot_count; i++)
		if (atomic_load(&r->pending[i]) && (!o.outstanding || r->queued_ns[i] < o.oldest_ns)) {
			o.outstanding = true;
			o.oldest_ns = r->queued_ns[i];
			oldest = i;
		}
	if (c->draining && !o.outstanding) {
		/* Draining: only an error matters (its callback will never come). */
		o.outstanding = true;
		o.oldest_ns = 0;
	}
	if (!gpuwatch_should_query(pol, &o)) {
		if (!o.outstanding)
			c->watch = (struct gpuwatch_state){0};
		return;
	}
	o.released = devring_word_reached(__atomic_load_n(&r->words[oldest], __ATOMIC_ACQUIRE), r->target[oldest]);
	if (g->drv->cuCtxPushCurrent(c->dev->ctx) == CUDA_SUCCESS) {
		res = g->drv->cuStreamQuery(c->stream);
		g->drv->cuCtxPopCurrent(&popped);
	}
	o.query = res == CUDA_SUCCESS ? 0 : res == CUDA_ERROR_NOT_READY ? 1 : cuda_errno(res);
	if (c->draining) {
		if (o.query < 0 && !atomic_exchange(&r->drain_claimed, true)) {
			log_error("%s: the device ring's stream failed while closing (%s): freeing it", r->p.device,
				  cudadrv_error(g->drv, res));
			r->free_msg.op = OP_FREE;
			push_request(g, &r->free_msg);
		}
		return;
	}
	v = gpuwatch_judge(pol, &c->watch, &o);
	switch (v) {
	case GPUWATCH_COMPLETE:
		for (uint32_t i = 0; i < r->p.slot_count; i++)
			copy_finish(r, i, 0);
		break;
	case GPUWATCH_FAIL_ERROR:
	case GPUWATCH_FAIL_STUCK:
	case GPUWATCH_FAIL_CLIENT:
		if (v == GPUWATCH_FAIL_ERROR)
			snprintf(r->failure, sizeof(r->failure), "%s (%s)", gpuwatch_verdict_name(v),
				 cudadrv_error(g->drv, res));
		else
			snprintf(r->failure, sizeof(r->failure), "%s in %llu s (device slot %u)",
				 gpuwatch_verdict_name(v), (unsigned long long)((now - o.oldest_ns) / 1000000000ull),
				 oldest);
		log_error("%s: %s: failing the device ring", r->p.device, r->failure);
		for (uint32_t i = 0; i < r->p.slot_count; i++)
			copy_finish(r, i, v == GPUWATCH_FAIL_ERROR ? -EIO : -ETIMEDOUT);
		break;
	default: break;
	}
}

/* Whether any ring has something outstanding (the thread then wakes up
 * for the watchdog). */
static bool watch_needed(struct gpu *g)
{
	for (struct gpu_ring *r = g->watched; r; r = r->cu.next) {
		if (r->cu.draining)
			return true;
		for (uint32_t i = 0; i < r->p.slot_count; i++)
			if (atomic_load(&r->pending[i]))
				return true;
	}
	return false;
}

static void watch_all(struct gpu *g)
{
	uint64_t now = monotonic_ns();

	if (now < g->watch_at_ns)
		return;
	g->watch_at_ns = now + GPU_WATCH_PERIOD_NS;
	for (struct gpu_ring *r = g->watched; r; r = r->cu.next)
		watch_ring(g, r, now);
}
#else
static int ring_setup_step(struct gpu_ring *r, bool *done)
{
	const char *why = "";
	const struct cudadrv *drv;
	int err = cudadrv_get(&drv, &why);

	*done = false;
	snprintf(r->why, sizeof(r->why), "%s", why);
	set_status(r->g, "%s", why);
	return err < 0 ? err : -ENOSYS;
}

static int ring_copy(struct gpu_ring *r, uint32_t slot, uint32_t count, uint64_t target)
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

static void copy_finish(struct gpu_ring *r, uint32_t slot, int err)
{
	struct gpu_msg *done = &r->copy_done[slot];

	done->op = OP_COPIED;
	done->err = err;
	push_done(r->g, done);
}

static bool watch_needed(struct gpu *g)
{
	return false;
}

static void watch_all(struct gpu *g)
{
}
#endif

static void handle_request(struct gpu *g, struct gpu_msg *m)
{
	struct gpu_ring *r = m->ring;

	switch (m->op) {
	case OP_OPEN: {
		bool done = false;

		r->open_msg.err = ring_setup_step(r, &done);
		if (r->open_msg.err == 0 && !done) {
			push_request(g, &r->open_msg); /* the next step, behind what waits */
			break;
		}
		r->open_msg.op = OP_OPENED;
		push_done(g, &r->open_msg);
		break;
	}
	case OP_COPY: {
		int err = ring_copy(r, m->slot, m->count, m->target);

		if (err < 0) {
			atomic_store(&r->pending[m->slot], true);
			copy_finish(r, m->slot, err);
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
	default: break;
	}
}

static void *gpu_thread(void *arg)
{
	struct gpu *g = arg;

	pthread_mutex_lock(&g->lock);
	for (;;) {
		struct gpu_msg *m;

		while (!g->req_head && !g->stop) {
			if (watch_needed(g)) {
				struct timespec ts;

				clock_gettime(CLOCK_MONOTONIC, &ts);
				ts.tv_sec += 1;
				pthread_cond_timedwait(&g->cond, &g->lock, &ts);
				pthread_mutex_unlock(&g->lock);
				watch_all(g);
				pthread_mutex_lock(&g->lock);
			} else {
				pthread_cond_wait(&g->cond, &g->lock);
			}
		}
		if (!g->req_head)
			break;
		m = g->req_head;
		g->req_head = m->next;
		if (!g->req_head)
			g->req_tail = NULL;
		pthread_mutex_unlock(&g->lock);
		handle_request(g, m);
		watch_all(g); /* at most once a period, busy or not */
		pthread_mutex_lock(&g->lock);
	}
	pthread_mutex_unlock(&g->lock);
	return NULL;
}

/* ---- the loop side ---- */

/* The release words: a sealed memfd (it cannot shrink under either side)
 * mapped read-write here; its fd goes to the client. */
static int words_create(struct gpu_ring *r)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	int fd, err;
	void *m;

	r->words_bytes = (GPU_RELEASE_WORDS_BYTES(r->p.slot_count) + page - 1) / page * page;
	fd = memfd_create("stoker-release-words", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)r->words_bytes) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	m = mmap(NULL, r->words_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (m == MAP_FAILED) {
		err = -errno;
		close(fd);
		return err;
	}
	r->words = m;
	r->ex.words_fd = fd;
	return 0;
}

static void words_free(struct gpu_ring *r)
{
	if (r->words)
		munmap(r->words, r->words_bytes);
	if (r->ex.words_fd >= 0)
		close(r->ex.words_fd);
	r->words = NULL;
	r->ex.words_fd = -1;
}

static void gpu_ring_free(struct gpu_ring *r)
{
	struct gpu *g = r->g;

	devring_release_state(&r->dr);
	if (r->ex.fd >= 0)
		close(r->ex.fd);
	words_free(r);
	free(r->copy_req);
	free(r->copy_done);
	free(r->pending);
	free(r->queued_ns);
	free(r->target);
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
		default: break;
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
	m->target = devring_release_target(&r->dr, slot);
	push_request(r->g, m);
	return 0;
}

/* The client has gone (loop thread, no CUDA call): a client killed with
 * work queued before its release never advances the word, so write each
 * word from the CPU; the copies waiting on them run, the ring drains. */
static void submit_unblock(void *backend)
{
	struct gpu_ring *r = backend;

	for (uint32_t i = 0; i < r->p.slot_count; i++) {
		uint64_t target = devring_release_target(&r->dr, i);
		uint64_t *w = &r->words[i];

		if (!devring_word_reached(__atomic_load_n(w, __ATOMIC_ACQUIRE), target))
			__atomic_store_n(w, target, __ATOMIC_RELEASE);
	}
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
	.unblock = submit_unblock,
};

/*
 * For tests/gpu/run.sh only, from the environment (never set by the units):
 * STOKER_TEST_GPU_RELEASE_AFTER_S shortens the watchdog's wait for a
 * client's release; STOKER_TEST_GPU_FAULT=illegal-address makes the first
 * float copy's kernel write out of bounds, an asynchronous GPU error.
 */
static void gpu_test_knobs(struct gpu *g)
{
	const char *v = secure_getenv("STOKER_TEST_GPU_RELEASE_AFTER_S");

	if (v && *v) {
		g->watch.release_after_ns = strtoull(v, NULL, 10) * 1000000000ull;
		log_warning("STOKER_TEST_GPU_RELEASE_AFTER_S: a client's release is awaited %s s at most", v);
	}
	v = secure_getenv("STOKER_TEST_GPU_FAULT");
	if (v && !strcmp(v, "illegal-address")) {
		g->fault_once = true;
		log_warning("STOKER_TEST_GPU_FAULT: the first float copy will fault on the GPU");
	}
}

int gpu_new(uv_loop_t *loop, struct gpu **out)
{
	struct gpu *g = calloc(1, sizeof(*g));
	int r;

	if (!g)
		return -ENOMEM;
	g->loop = loop;
	snprintf(g->status, sizeof(g->status), "unused");
	g->watch = gpuwatch_default;
	gpu_test_knobs(g);
	r = -pthread_mutex_init(&g->lock, NULL);
	if (r < 0)
		goto fail;
	{
		pthread_condattr_t ca; /* the watchdog's timed waits: on the monotonic clock */

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		r = -pthread_cond_init(&g->cond, &ca);
		pthread_condattr_destroy(&ca);
	}
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
	if (p->slot_count == 0)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->g = g;
	r->owner = owner;
	r->cb = *cb;
	r->p = *p;
	r->ex.fd = r->ex.words_fd = -1;
	r->u8_image_bytes = (uint64_t)p->image_size * p->image_size * 3;
	r->image_bytes = r->u8_image_bytes * sample_dtype_bytes(p->dtype);
	r->copy_req = calloc(p->slot_count, sizeof(*r->copy_req));
	r->copy_done = calloc(p->slot_count, sizeof(*r->copy_done));
	r->pending = calloc(p->slot_count, sizeof(*r->pending));
	r->queued_ns = calloc(p->slot_count, sizeof(*r->queued_ns));
	r->target = calloc(p->slot_count, sizeof(*r->target));
	if (!r->copy_req || !r->copy_done || !r->pending || !r->queued_ns || !r->target) {
		err = -ENOMEM;
		goto fail;
	}
	err = words_create(r);
	if (err < 0)
		goto fail;
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
	words_free(r);
	free(r->copy_req);
	free(r->copy_done);
	free(r->pending);
	free(r->queued_ns);
	free(r->target);
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

const char *gpu_ring_failure(const struct gpu_ring *r)
{
	return r ? r->failure : "";
}
