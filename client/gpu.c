/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cudadrv.h"
#include "gpu.h"

#ifdef STOKER_HAVE_CUDA
struct client_gpu {
	const struct cudadrv *drv;
	CUdevice dev;
	CUcontext ctx;
	CUmemGenericAllocationHandle handle;
	bool has_handle, reserved, mapped, words_registered;
	CUdeviceptr base, words_dev;
	size_t size;
	uint32_t slot_count;
	uint64_t slot_bytes;
	uint64_t *words;    /* [slot_count]: the release words, mapped from the host ring */
	size_t words_bytes; /* the mapping (whole pages) */
	uint64_t *released; /* [slot_count]: this process's releases of each slot */
};

struct client_pin {
	const struct cudadrv *drv;
	CUdevice dev;
	CUcontext ctx;
	bool retained; /* a primary context retained (else the caller's current one) */
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
	char reason[320];
	int r = device_get(ordinal, &drv, &dev, why, whysize);

	if (r < 0)
		return r;
	/* Before the daemon makes anything: what a device ring needs of the GPU. */
	r = cudadrv_check_device(drv, dev, CUDADRV_NEED_RING | CUDADRV_NEED_SHARE, reason, sizeof(reason));
	if (r < 0) {
		snprintf(why, whysize, "cuda:%d: %s", ordinal, reason);
		return r;
	}
	res = drv->cuDeviceGetUuid(&u, dev);
	if (res != CUDA_SUCCESS) {
		snprintf(why, whysize, "cuda:%d: %s", ordinal, cudadrv_error(drv, res));
		return -ENODEV;
	}
	memcpy(uuid, u.bytes, CLIENT_GPU_UUID_BYTES);
	return 0;
}

/* The release words, mapped read-write from their memfd (sealed: it
 * cannot shrink under us). */
static int map_words(struct client_gpu *cg, int words_fd, const Stoker__DeviceRing *dr, char *why, size_t whysize)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	struct stat st;
	int seals;
	void *p;

	cg->words_bytes = ((size_t)dr->slot_count * sizeof(uint64_t) + page - 1) / page * page;
	seals = fcntl(words_fd, F_GET_SEALS);
	if (!dr->has_release_words_offset || dr->release_words_offset % page || seals < 0 || !(seals & F_SEAL_SHRINK) ||
	    fstat(words_fd, &st) < 0 || (uint64_t)st.st_size < dr->release_words_offset ||
	    (uint64_t)st.st_size - dr->release_words_offset < cg->words_bytes) {
		snprintf(why, whysize, "the daemon sent impossible release words (an older stokerd?)");
		return -EPROTO;
	}
	p = mmap(NULL, cg->words_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, words_fd, (off_t)dr->release_words_offset);
	if (p == MAP_FAILED) {
		snprintf(why, whysize, "cannot map the device ring's release words: %s", strerror(errno));
		return -errno;
	}
	cg->words = p;
	return 0;
}

#define CU(fn, ...) CUDADRV_TRY(cg->drv, fn, __VA_ARGS__)

int client_gpu_import(int ordinal, int fd, int words_fd, const Stoker__DeviceRing *dr, struct client_gpu **out,
		      char *why, size_t whysize)
{
	struct client_gpu *cg;
	const struct cudadrv *drv;
	CUresult res = CUDA_SUCCESS;
	const char *what = "";
	CUmemAccessDesc access;
	uint8_t uuid[CLIENT_GPU_UUID_BYTES];
	int r;

	if (dr->device_uuid.len != CLIENT_GPU_UUID_BYTES || dr->slot_count == 0) {
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
	cg->slot_count = dr->slot_count;
	cg->released = calloc(dr->slot_count, sizeof(*cg->released));
	if (!cg->released) {
		client_gpu_free(cg);
		return -ENOMEM;
	}
	r = map_words(cg, words_fd, dr, why, whysize);
	if (r < 0) {
		client_gpu_free(cg);
		return r;
	}
	/* This process's counts start at the words' values (zero). */
	for (uint32_t i = 0; i < cg->slot_count; i++)
		cg->released[i] = __atomic_load_n(&cg->words[i], __ATOMIC_ACQUIRE);
	r = enter(ordinal, &drv, &cg->dev, &cg->ctx, why, whysize);
	if (r < 0) {
		client_gpu_free(cg); /* no context held yet: drv stays NULL there */
		return r;
	}
	cg->drv = drv;
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
	CU(cuMemHostRegister, cg->words, cg->words_bytes, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE);
	cg->words_registered = true;
	CU(cuMemHostGetDevicePointer, &cg->words_dev, cg->words, 0);
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

/* Until every release written so far has landed: the work queued before
 * each has run, so nothing still reads the ring. Stops early if the
 * context has failed (nothing runs there any more). */
static void wait_releases(struct client_gpu *cg)
{
	struct timespec nap = {0, 50000};

	for (;;) {
		uint32_t i = 0;
		CUresult q;

		while (i < cg->slot_count &&
		       (int64_t)(__atomic_load_n(&cg->words[i], __ATOMIC_ACQUIRE) - cg->released[i]) >= 0)
			i++;
		if (i == cg->slot_count)
			return;
		q = cg->drv->cuStreamQuery(NULL); /* a sticky context error shows here */
		if (q != CUDA_SUCCESS && q != CUDA_ERROR_NOT_READY)
			return;
		nanosleep(&nap, NULL);
		if (nap.tv_nsec < 5000000)
			nap.tv_nsec *= 2;
	}
}

void client_gpu_free(struct client_gpu *cg)
{
	if (!cg)
		return;
	if (cg->drv) {
		cg->drv->cuCtxPushCurrent(cg->ctx);
		if (cg->words_registered)
			wait_releases(cg);
		if (cg->words_registered)
			cg->drv->cuMemHostUnregister(cg->words);
		if (cg->mapped)
			cg->drv->cuMemUnmap(cg->base, cg->size);
		if (cg->reserved)
			cg->drv->cuMemAddressFree(cg->base, cg->size);
		if (cg->has_handle)
			cg->drv->cuMemRelease(cg->handle);
		leave(cg->drv);
		cg->drv->cuDevicePrimaryCtxRelease(cg->dev);
	}
	if (cg->words)
		munmap(cg->words, cg->words_bytes);
	free(cg->released);
	free(cg);
}

uint64_t client_gpu_slot_ptr(const struct client_gpu *cg, uint32_t slot)
{
	return cg && slot < cg->slot_count ? (uint64_t)cg->base + slot * cg->slot_bytes : 0;
}

int client_gpu_release(struct client_gpu *cg, uint32_t slot, void *stream, char *why, size_t whysize)
{
	CUresult res;

	if (!cg || slot >= cg->slot_count)
		return -EINVAL;
	res = cg->drv->cuCtxPushCurrent(cg->ctx);
	if (res == CUDA_SUCCESS) {
		/* Ordered after the stream's earlier work (the default flags
		 * include the memory barrier). */
		res = cg->drv->cuStreamWriteValue64((CUstream)stream, cg->words_dev + slot * sizeof(uint64_t),
						    cg->released[slot] + 1, 0);
		leave(cg->drv);
	}
	if (res != CUDA_SUCCESS) {
		snprintf(why, whysize, "cuStreamWriteValue64 of the batch's release: %s", cudadrv_error(cg->drv, res));
		return -EIO;
	}
	cg->released[slot]++;
	return 0;
}

void client_gpu_release_untaken(struct client_gpu *cg, uint32_t slot)
{
	if (!cg || slot >= cg->slot_count)
		return;
	/* Nothing on the GPU read it. The stream's last write to this word
	 * landed before the daemon could refill the slot and announce it. */
	cg->released[slot]++;
	__atomic_store_n(&cg->words[slot], cg->released[slot], __ATOMIC_RELEASE);
}

int client_pin(void *addr, size_t bytes, struct client_pin **out, char *why, size_t whysize)
{
	const struct cudadrv *drv;
	const char *reason;
	struct client_pin *p;
	CUcontext cur = NULL;
	CUresult res;
	int ro = 0, r, n = 0;

	r = cudadrv_get(&drv, &reason);
	if (r < 0) {
		snprintf(why, whysize, "%s", reason);
		return r;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->drv = drv;
	/* The calling thread's context; else one the process already has. A
	 * context made here would hold hundreds of MiB on a GPU nobody chose. */
	if (drv->cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur && drv->cuCtxGetDevice(&p->dev) == CUDA_SUCCESS) {
		p->ctx = cur;
	} else if (drv->cuDeviceGetCount(&n) == CUDA_SUCCESS) {
		for (int i = 0; i < n && !p->ctx; i++) {
			unsigned flags = 0;
			int active = 0;
			CUdevice dev;

			if (drv->cuDeviceGet(&dev, i) != CUDA_SUCCESS ||
			    drv->cuDevicePrimaryCtxGetState(dev, &flags, &active) != CUDA_SUCCESS || !active ||
			    drv->cuDevicePrimaryCtxRetain(&p->ctx, dev) != CUDA_SUCCESS)
				continue;
			p->dev = dev;
			p->retained = true;
		}
	}
	if (!p->ctx) {
		snprintf(why, whysize,
			 "no CUDA context in this process yet (pin_memory uses the current one and never "
			 "creates one): initialise CUDA on the training GPU first");
		free(p);
		return -ENODEV;
	}
	if (drv->cuCtxPushCurrent(p->ctx) != CUDA_SUCCESS) {
		snprintf(why, whysize, "cannot use the process's CUDA context");
		r = -ENODEV;
		goto fail_ctx;
	}
	res = drv->cuDeviceGetAttribute(&ro, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, p->dev);
	if (res != CUDA_SUCCESS || !ro) {
		snprintf(why, whysize, "this GPU cannot page-lock read-only memory (cudaHostRegisterReadOnly)");
		r = -ENOTSUP;
		goto fail;
	}
	res = drv->cuMemHostRegister(addr, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_READ_ONLY);
	if (res != CUDA_SUCCESS) {
		snprintf(why, whysize, "cuMemHostRegister of the %zu-byte ring: %s", bytes, cudadrv_error(drv, res));
		r = res == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
		goto fail;
	}
	leave(drv);
	p->addr = addr;
	*out = p;
	return 0;
fail:
	leave(drv);
fail_ctx:
	if (p->retained)
		drv->cuDevicePrimaryCtxRelease(p->dev);
	free(p);
	return r;
}

void client_unpin(struct client_pin *p)
{
	if (!p)
		return;
	if (p->drv->cuCtxPushCurrent(p->ctx) == CUDA_SUCCESS) {
		p->drv->cuMemHostUnregister(p->addr);
		leave(p->drv);
	}
	if (p->retained)
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

int client_gpu_import(int ordinal, int fd, int words_fd, const Stoker__DeviceRing *dr, struct client_gpu **out,
		      char *why, size_t whysize)
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

int client_gpu_release(struct client_gpu *cg, uint32_t slot, void *stream, char *why, size_t whysize)
{
	return unavailable(why, whysize);
}

void client_gpu_release_untaken(struct client_gpu *cg, uint32_t slot)
{
}

int client_pin(void *addr, size_t bytes, struct client_pin **out, char *why, size_t whysize)
{
	return unavailable(why, whysize);
}

void client_unpin(struct client_pin *p)
{
}
#endif
