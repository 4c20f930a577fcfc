/* SPDX-License-Identifier: MIT */
/*
 * A fake libcuda.so.1 for make check (no GPU there): what proto/cudadrv.c
 * loads when STOKER_LIBCUDA names it. It reports GPUs with the attributes
 * the environment chooses, so that both sides' refusals (compute mode,
 * capabilities) and a retried cuInit are tested without a device:
 *
 *   FAKE_CUDA_DEVICES        how many GPUs (default 1)
 *   FAKE_CUDA_COMPUTE_MODE   CU_DEVICE_ATTRIBUTE_COMPUTE_MODE (default 0, DEFAULT)
 *   FAKE_CUDA_VMM, FAKE_CUDA_POSIX_FD, FAKE_CUDA_MEMOPS, FAKE_CUDA_POOLS
 *                            the capabilities stoker checks (default 1)
 *   FAKE_CUDA_INIT_FAILS_WHILE  a path: cuInit fails (NO_DEVICE) while it exists
 *
 * Every other entry point is a stub (fake_stubs.c, generated from
 * CUDADRV_SYMBOLS) that answers CUDA_ERROR_NOT_SUPPORTED. Device i's UUID
 * is 16 bytes of 0xf0 + i.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#define EXPORT __attribute__((visibility("default")))

static int env_int(const char *name, int def)
{
	const char *v = getenv(name);

	return v && *v ? atoi(v) : def;
}

EXPORT CUresult cuInit(unsigned int flags)
{
	const char *path = getenv("FAKE_CUDA_INIT_FAILS_WHILE");

	(void)flags;
	return path && access(path, F_OK) == 0 ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorString(CUresult error, const char **str)
{
	switch (error) {
	case CUDA_ERROR_NO_DEVICE: *str = "no CUDA-capable device is detected (fake)"; break;
	case CUDA_ERROR_NOT_SUPPORTED: *str = "operation not supported (fake driver)"; break;
	default: *str = "fake error";
	}
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
	*v = 13000;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *n)
{
	*n = env_int("FAKE_CUDA_DEVICES", 1);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	if (ordinal < 0 || ordinal >= env_int("FAKE_CUDA_DEVICES", 1))
		return CUDA_ERROR_INVALID_DEVICE;
	*d = ordinal;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d)
{
	memset(u->bytes, 0xf0 + d, sizeof(u->bytes));
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
	(void)d;
	switch (a) {
	case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: *v = env_int("FAKE_CUDA_COMPUTE_MODE", CU_COMPUTEMODE_DEFAULT); break;
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *v = env_int("FAKE_CUDA_VMM", 1); break;
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
		*v = env_int("FAKE_CUDA_POSIX_FD", 1);
		break;
	case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: *v = env_int("FAKE_CUDA_MEMOPS", 1); break;
	case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *v = env_int("FAKE_CUDA_POOLS", 1); break;
	default: *v = 0;
	}
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
					      CUmemAllocationGranularity_flags option)
{
	(void)prop;
	(void)option;
	*g = 2 << 20;
	return CUDA_SUCCESS;
}

/* No context exists in the fake: pin_memory finds none to use. */
EXPORT CUresult cuCtxGetCurrent(CUcontext *c)
{
	*c = NULL;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active)
{
	(void)d;
	*flags = 0;
	*active = 0;
	return CUDA_SUCCESS;
}
