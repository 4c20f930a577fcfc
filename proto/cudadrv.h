/* SPDX-License-Identifier: MIT */
/*
 * The CUDA driver API, loaded at run time. stokerd and libstoker never link
 * libcuda (nor libcudart): the same binaries run on nodes without a GPU or
 * driver. cudadrv_get() dlopen()s libcuda.so.1 once per process, resolves
 * every entry point below by its versioned name (the one cuda.h maps the
 * plain name to, e.g. cuMemAlloc -> cuMemAlloc_v2) and calls cuInit(0).
 *
 * Built without cuda.h (no CUDA toolkit: STOKER_HAVE_CUDA undefined), the
 * struct is empty and cudadrv_get() always says why CUDA is not usable.
 * (copybench in tests/gpu uses cuMemAlloc/cuMemFree; stoker itself does not.)
 * Shared by daemon/gpu/gpu.c and client/gpu.c, the only users.
 */
#ifndef STOKER_CUDADRV_H
#define STOKER_CUDADRV_H

#include <stddef.h>

#ifdef STOKER_HAVE_CUDA
#include <cuda.h>

/* Every driver entry point stoker uses, daemon and client together. */
/* One entry point per X(), as many a line as fit. */
/* clang-format off */
#define CUDADRV_SYMBOLS(X)                                                                                                          \
	X(cuInit) X(cuGetErrorString) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet)                                      \
	X(cuDeviceGetUuid) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)                         \
	X(cuDevicePrimaryCtxGetState)                                                                                               \
	X(cuCtxPushCurrent) X(cuCtxPopCurrent) X(cuCtxGetCurrent) X(cuCtxGetDevice) X(cuMemGetInfo)                                 \
	X(cuMemGetAllocationGranularity) X(cuMemCreate) X(cuMemRelease) X(cuMemExportToShareableHandle)                             \
	X(cuMemImportFromShareableHandle) X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap) X(cuMemUnmap)                      \
	X(cuMemSetAccess) X(cuMemAlloc) X(cuMemFree) X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuMemcpyHtoDAsync) X(cuMemHostRegister) \
	X(cuMemHostUnregister) X(cuMemHostGetDevicePointer) X(cuStreamCreate) X(cuStreamDestroy)                                    \
	X(cuStreamQuery) X(cuStreamWaitValue64) X(cuStreamWriteValue64) X(cuLaunchHostFunc)                                         \
	X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuLaunchKernel)
/* clang-format on */

struct cudadrv {
	void *lib;
	int version; /* cuDriverGetVersion: 1000 * major + 10 * minor */
#define CUDADRV_MEMBER(name) __typeof__(name) *name;
	CUDADRV_SYMBOLS(CUDADRV_MEMBER)
#undef CUDADRV_MEMBER
};

/* Call a driver entry point through `drv`; on failure keep its result in
 * `res`, its name in `what`, and jump to `fail` (the callers' convention). */
#define CUDADRV_TRY(drv, fn, ...)             \
	do {                                  \
		res = (drv)->fn(__VA_ARGS__); \
		if (res != CUDA_SUCCESS) {    \
			what = #fn;           \
			goto fail;            \
		}                             \
	} while (0)

/* The text of a driver result, for messages. */
const char *cudadrv_error(const struct cudadrv *drv, CUresult r);

/* What cudadrv_check_device() requires of a GPU. */
enum {
	CUDADRV_NEED_RING = 1 << 0,  /* a device ring: VMM with POSIX fds, 64-bit stream memory operations */
	CUDADRV_NEED_SHARE = 1 << 1, /* another process (stokerd) needs a context there too */
	CUDADRV_NEED_POOLS = 1 << 2, /* stream-ordered allocation (cuMemAllocAsync) */
};

/*
 * Whether `dev` offers what `need` asks, before anything is created there:
 * its compute mode (PROHIBITED: no context at all; EXCLUSIVE_PROCESS: not
 * with CUDADRV_NEED_SHARE), and the capabilities. 0, or -EPERM (compute
 * mode) / -ENOTSUP (a capability) with the reason in `why`.
 */
int cudadrv_check_device(const struct cudadrv *drv, CUdevice dev, unsigned need, char *why, size_t whysize);
#else
struct cudadrv {
	void *lib;
	int version;
};
#endif

/*
 * An attach's device: "cpu" (*ordinal -1) or "cuda:N" (N: 0..1023, no
 * leading zero), the one grammar of client and daemon. 0, or -EINVAL.
 */
int cudadrv_parse_device(const char *s, int *ordinal);

/*
 * The process's driver, loaded and initialised on the first call (thread
 * safe). 0 and *out on success; otherwise -ENOSYS (built without CUDA),
 * -ENOENT (no libcuda.so.1: no driver on this node), -ENODEV (cuInit failed:
 * no GPU, or none usable) or -ENOTSUP (the driver lacks an entry point),
 * with the reason in *why (the process's static text). A failure is not
 * kept for ever: the next call after a back-off (1 s, doubling to 60 s)
 * tries again, so a driver or device node that appears later (nvidia-uvm
 * loaded on demand) is found without a restart.
 *
 * STOKER_LIBCUDA (ignored in setuid processes: secure_getenv) names
 * another library to load instead of libcuda.so.1: the tests' fake driver
 * (tests/unit/fake_libcuda.c), which reports chosen device attributes.
 */
int cudadrv_get(const struct cudadrv **out, const char **why);

#endif
