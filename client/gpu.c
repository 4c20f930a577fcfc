/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudadrv.h"
#include "gpu.h"

#ifdef STOKER_HAVE_CUDA
struct client_gpu {
	const struct cudadrv *drv;
	CUdevice dev;
	CUcontext ctx;
	CUmemGenericAllocationHandle handle;
	bool has_handle, reserved, mapped;
	CUdeviceptr base;
	size_t size;
	uint32_t slot_count;
	uint64_t slot_bytes;
	CUevent *ready, *release; /* [slot_count] */
};

struct client_pin {
	const struct cudadrv *drv;
	CUdevice dev;
	CUcontext ctx;
	void *addr;
};

/* The driver, and this process's device `ordinal`. */
static int device_get(int ordinal, const struct cudadrv **drv, CUdevice *dev, char *why, size_t whysize)
{
	const char *reason;
	CUresult res;
	int n = 0, r;

	r = cudadrv_get(drv, &reason);
	if (r < 0) {
		snprintf(why, whysize, "%s", reason);
		return r;
	}
	res = (*drv)->cuDeviceGetCount(&n);
	if (res != CUDA_SUCCESS || ordinal < 0 || ordinal >= n) {
		snprintf(why, whysize, "cuda:%d does not exist: this process sees %d GPU%s", ordinal, n,
			 n == 1 ? "" : "s");
		return -ENODEV;
	}
	res = (*drv)->cuDeviceGet(dev, ordinal);
	if (res != CUDA_SUCCESS) {
		snprintf(why, whysize, "cuda:%d: %s", ordinal, cudadrv_error(*drv, res));
		return -ENODEV;
	}
	return 0;
}

/* The driver, and this process's device `ordinal` with its primary context
 * retained and pushed. */
static int enter(int ordinal, const struct cudadrv **drv, CUdevice *dev, CUcontext *ctx, char *why, size_t whysize)
{
	CUresult res;
	int r = device_get(ordinal, drv, dev, why, whysize);

	if (r < 0)
		return r;
	res = (*drv)->cuDevicePrimaryCtxRetain(ctx, *dev);
	if (res == CUDA_SUCCESS) {
		res = (*drv)->cuCtxPushCurrent(*ctx);
		if (res != CUDA_SUCCESS)
			(*drv)->cuDevicePrimaryCtxRelease(*dev);
	}
	if (res != CUDA_SUCCESS) {
		snprintf(why, whysize, "cuda:%d: cannot use its context: %s", ordinal, cudadrv_error(*drv, res));
		return -ENODEV;
	}
	return 0;
}

static void leave(const struct cudadrv *drv)
{
	CUcontext popped;

	drv->cuCtxPopCurrent(&popped);
}

int client_gpu_resolve(int ordinal, uint8_t uuid[CLIENT_GPU_UUID_BYTES], char *why, size_t whysize)
{
	const struct cudadrv *drv;
	CUdevice dev;
	CUuuid u;
	CUresult res;
	int r = device_get(ordinal, &drv, &dev, why, whysize);

	if (r < 0)
		return r;
	res = drv->cuDeviceGetUuid(&u, dev);
	if (res != CUDA_SUCCESS) {
		snprintf(why, whysize, "cuda:%d: %s", ordinal, cudadrv_error(drv, res));
		return -ENODEV;
	}
	memcpy(uuid, u.bytes, CLIENT_GPU_UUID_BYTES);
	return 0;
}

#define CU(fn, ...) CUDADRV_TRY(cg->drv, fn, __VA_ARGS__)

int client_gpu_import(int ordinal, int fd, const Stoker__DeviceRing *dr, struct client_gpu **out, char *why,
		      size_t whysize)
{
	struct client_gpu *cg;
	const struct cudadrv *drv;
	CUresult res = CUDA_SUCCESS;
	const char *what = "";
	CUmemAccessDesc access;
	uint8_t uuid[CLIENT_GPU_UUID_BYTES];
	int r;

	if (dr->device_uuid.len != CLIENT_GPU_UUID_BYTES || dr->n_ready_events != dr->slot_count ||
	    dr->n_release_events != dr->slot_count) {
		snprintf(why, whysize, "the daemon described an impossible device ring");
		return -EPROTO;
	}
	r = client_gpu_resolve(ordinal, uuid, why, whysize);
	if (r < 0)
		return r;
	if (memcmp(uuid, dr->device_uuid.data, CLIENT_GPU_UUID_BYTES)) {
		snprintf(why, whysize, "the daemon put the device ring on another GPU than cuda:%d", ordinal);
		return -EPROTO;
	}
	cg = calloc(1, sizeof(*cg));
	if (!cg)
		return -ENOMEM;
	cg->ready = calloc(dr->slot_count, sizeof(*cg->ready));
	cg->release = calloc(dr->slot_count, sizeof(*cg->release));
	if (!cg->ready || !cg->release) {
		client_gpu_free(cg);
		return -ENOMEM;
	}
	r = enter(ordinal, &drv, &cg->dev, &cg->ctx, why, whysize);
	if (r < 0) {
		client_gpu_free(cg); /* no context held yet: drv stays NULL there */
		return r;
	}
	cg->drv = drv;
	cg->slot_count = dr->slot_count;
	cg->slot_bytes = dr->slot_bytes;
	cg->size = dr->ring_bytes;
	/* The import takes its own reference: the caller may close fd. */
	CU(cuMemImportFromShareableHandle, &cg->handle, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	cg->has_handle = true;
	CU(cuMemAddressReserve, &cg->base, cg->size, 0, 0, 0);
	cg->reserved = true;
	CU(cuMemMap, cg->base, cg->size, 0, cg->handle, 0);
	cg->mapped = true;
	memset(&access, 0, sizeof(access));
	access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	access.location.id = (int)cg->dev;
	access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	CU(cuMemSetAccess, cg->base, cg->size, &access, 1);
	for (uint32_t i = 0; i < cg->slot_count; i++) {
		CUipcEventHandle h;

		if (dr->ready_events[i].len != sizeof(h.reserved) || dr->release_events[i].len != sizeof(h.reserved)) {
			res = CUDA_ERROR_INVALID_VALUE;
			what = "the daemon's event handles";
			goto fail;
		}
		memcpy(h.reserved, dr->ready_events[i].data, sizeof(h.reserved));
		CU(cuIpcOpenEventHandle, &cg->ready[i], h);
		memcpy(h.reserved, dr->release_events[i].data, sizeof(h.reserved));
		CU(cuIpcOpenEventHandle, &cg->release[i], h);
	}
	leave(cg->drv);
	*out = cg;
	return 0;
fail:
	snprintf(why, whysize, "cannot map the device ring on cuda:%d: %s: %s", ordinal, what,
		 cudadrv_error(cg->drv, res));
	leave(cg->drv);
	client_gpu_free(cg);
	return -EIO;
}

void client_gpu_free(struct client_gpu *cg)
{
	if (!cg)
		return;
	if (cg->drv) {
		cg->drv->cuCtxPushCurrent(cg->ctx);
		for (uint32_t i = 0; i < cg->slot_count; i++) {
			if (cg->ready[i])
				cg->drv->cuEventDestroy(cg->ready[i]);
			if (cg->release[i])
				cg->drv->cuEventDestroy(cg->release[i]);
		}
		if (cg->mapped)
			cg->drv->cuMemUnmap(cg->base, cg->size);
		if (cg->reserved)
			cg->drv->cuMemAddressFree(cg->base, cg->size);
		if (cg->has_handle)
			cg->drv->cuMemRelease(cg->handle);
		leave(cg->drv);
		cg->drv->cuDevicePrimaryCtxRelease(cg->dev);
	}
	free(cg->ready);
	free(cg->release);
	free(cg);
}

uint64_t client_gpu_slot_ptr(const struct client_gpu *cg, uint32_t slot)
{
	return cg && slot < cg->slot_count ? (uint64_t)cg->base + slot * cg->slot_bytes : 0;
}

/* Slot's ready event: `stream` waits on it; or its release event: recorded
 * on `stream`. In the ring's context. */
static int slot_event(struct client_gpu *cg, uint32_t slot, void *stream, bool release, char *why, size_t whysize)
{
	CUresult res;

	if (!cg || slot >= cg->slot_count)
		return -EINVAL;
	res = cg->drv->cuCtxPushCurrent(cg->ctx);
	if (res == CUDA_SUCCESS) {
		res = release ? cg->drv->cuEventRecord(cg->release[slot], (CUstream)stream)
			      : cg->drv->cuStreamWaitEvent((CUstream)stream, cg->ready[slot], 0);
		leave(cg->drv);
	}
	if (res == CUDA_SUCCESS)
		return 0;
	snprintf(why, whysize, "%s: %s",
		 release ? "cuEventRecord of the batch's release event" : "cuStreamWaitEvent on the batch's ready event",
		 cudadrv_error(cg->drv, res));
	return -EIO;
}

int client_gpu_wait(struct client_gpu *cg, uint32_t slot, void *stream, char *why, size_t whysize)
{
	return slot_event(cg, slot, stream, false, why, whysize);
}

int client_gpu_record_release(struct client_gpu *cg, uint32_t slot, void *stream, char *why, size_t whysize)
{
	return slot_event(cg, slot, stream, true, why, whysize);
}

int client_pin(void *addr, size_t bytes, struct client_pin **out, char *why, size_t whysize)
{
	struct client_pin *p = calloc(1, sizeof(*p));
	int ro = 0, r;
	CUresult res;

	if (!p)
		return -ENOMEM;
	/* Device 0's primary context; PORTABLE makes it pinned for all. */
	r = enter(0, &p->drv, &p->dev, &p->ctx, why, whysize);
	if (r < 0) {
		free(p);
		return r;
	}
	res = p->drv->cuDeviceGetAttribute(&ro, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, p->dev);
	if (res != CUDA_SUCCESS || !ro) {
		snprintf(why, whysize, "this GPU cannot page-lock read-only memory (cudaHostRegisterReadOnly)");
		r = -ENOTSUP;
		goto fail;
	}
	res = p->drv->cuMemHostRegister(addr, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_READ_ONLY);
	if (res != CUDA_SUCCESS) {
		snprintf(why, whysize, "cuMemHostRegister of the %zu-byte ring: %s", bytes, cudadrv_error(p->drv, res));
		r = res == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
		goto fail;
	}
	leave(p->drv);
	p->addr = addr;
	*out = p;
	return 0;
fail:
	leave(p->drv);
	p->drv->cuDevicePrimaryCtxRelease(p->dev);
	free(p);
	return r;
}

void client_unpin(struct client_pin *p)
{
	if (!p)
		return;
	p->drv->cuCtxPushCurrent(p->ctx);
	p->drv->cuMemHostUnregister(p->addr);
	leave(p->drv);
	p->drv->cuDevicePrimaryCtxRelease(p->dev);
	free(p);
}
#else
/* Built without CUDA: every call says so (cudadrv_get's reason). */
static int unavailable(char *why, size_t whysize)
{
	const struct cudadrv *drv;
	const char *reason = "";
	int r = cudadrv_get(&drv, &reason);

	snprintf(why, whysize, "%s", reason);
	return r < 0 ? r : -ENOSYS;
}

int client_gpu_resolve(int ordinal, uint8_t uuid[CLIENT_GPU_UUID_BYTES], char *why, size_t whysize)
{
	return unavailable(why, whysize);
}

int client_gpu_import(int ordinal, int fd, const Stoker__DeviceRing *dr, struct client_gpu **out, char *why,
		      size_t whysize)
{
	return unavailable(why, whysize);
}

void client_gpu_free(struct client_gpu *cg)
{
}

uint64_t client_gpu_slot_ptr(const struct client_gpu *cg, uint32_t slot)
{
	return 0;
}

int client_gpu_wait(struct client_gpu *cg, uint32_t slot, void *stream, char *why, size_t whysize)
{
	return unavailable(why, whysize);
}

int client_gpu_record_release(struct client_gpu *cg, uint32_t slot, void *stream, char *why, size_t whysize)
{
	return unavailable(why, whysize);
}

int client_pin(void *addr, size_t bytes, struct client_pin **out, char *why, size_t whysize)
{
	return unavailable(why, whysize);
}

void client_unpin(struct client_pin *p)
{
}
#endif
