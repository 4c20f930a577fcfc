/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudadrv.h"

int cudadrv_parse_device(const char *s, int *ordinal)
{
	size_t digits;

	if (!strcmp(s, "cpu")) {
		*ordinal = -1;
		return 0;
	}
	digits = strncmp(s, "cuda:", 5) ? 0 : strspn(s + 5, "0123456789");
	if (digits == 0 || digits > 4 || s[5 + digits] != '\0' || (digits > 1 && s[5] == '0') || atoi(s + 5) > 1023)
		return -EINVAL;
	*ordinal = atoi(s + 5);
	return 0;
}

#ifdef STOKER_HAVE_CUDA
#include <dlfcn.h>
#include <time.h>

#define RETRY_FIRST_NS 1000000000ull /* a failed load is tried again after 1 s, */
#define RETRY_MAX_NS 60000000000ull  /* doubling up to a minute */

static struct cudadrv driver;
static pthread_mutex_t driver_lock = PTHREAD_MUTEX_INITIALIZER;
static bool driver_ok;
static int driver_err;
static char driver_why[256];
static uint64_t retry_at_ns, retry_wait_ns;

#define CUDADRV_STR2(x) #x
#define CUDADRV_STR(x) CUDADRV_STR2(x)

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Load (if not yet) and resolve; then cuInit. Under driver_lock. */
static void driver_load(void)
{
	const char *path = secure_getenv("STOKER_LIBCUDA");
	CUresult r;

	driver_err = 0;
	if (!driver.lib) {
		/* RTLD_LOCAL: the driver's symbols stay out of the process's
		 * namespace, so a trainer's own CUDA runtime finds its own copy
		 * undisturbed (the same library: dlopen returns the one already
		 * loaded). */
		driver.lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
		if (!driver.lib) {
			const char *e = dlerror();

			driver_err = -ENOENT;
			snprintf(driver_why, sizeof(driver_why), "no CUDA driver on this node (%s)",
				 e ? e : "libcuda.so.1");
			return;
		}
#define CUDADRV_RESOLVE(name)                                                                               \
	if (!driver_err) {                                                                                  \
		*(void **)&driver.name = dlsym(driver.lib, CUDADRV_STR(name));                              \
		if (!driver.name) {                                                                         \
			driver_err = -ENOTSUP;                                                              \
			snprintf(driver_why, sizeof(driver_why), "the CUDA driver is too old: it lacks %s", \
				 CUDADRV_STR(name));                                                        \
		}                                                                                           \
	}
		CUDADRV_SYMBOLS(CUDADRV_RESOLVE)
#undef CUDADRV_RESOLVE
		if (driver_err)
			return; /* stays loaded: a driver does not change under a process */
	}
	r = driver.cuInit(0);
	if (r != CUDA_SUCCESS) {
		driver_err = -ENODEV;
		snprintf(driver_why, sizeof(driver_why), "CUDA is not usable on this node: cuInit: %s",
			 cudadrv_error(&driver, r));
		return;
	}
	if (driver.cuDriverGetVersion(&driver.version) != CUDA_SUCCESS)
		driver.version = 0;
	driver_ok = true;
}

const char *cudadrv_error(const struct cudadrv *drv, CUresult r)
{
	const char *s = NULL;

	if (drv->cuGetErrorString && drv->cuGetErrorString(r, &s) == CUDA_SUCCESS && s)
		return s;
	return "unknown CUDA error";
}

int cudadrv_get(const struct cudadrv **out, const char **why)
{
	int err = 0;

	pthread_mutex_lock(&driver_lock);
	if (!driver_ok && driver_err != -ENOTSUP) {
		uint64_t now = mono_ns();

		/* The first call, or a retry once the back-off has passed. */
		if (retry_at_ns == 0 || now >= retry_at_ns) {
			driver_load();
			if (!driver_ok) {
				retry_wait_ns = retry_wait_ns ? retry_wait_ns * 2 : RETRY_FIRST_NS;
				if (retry_wait_ns > RETRY_MAX_NS)
					retry_wait_ns = RETRY_MAX_NS;
				retry_at_ns = now + retry_wait_ns;
			}
		}
	}
	if (!driver_ok) {
		err = driver_err;
		*why = driver_why;
	}
	pthread_mutex_unlock(&driver_lock);
	if (err)
		return err;
	*out = &driver;
	return 0;
}

/* One attribute; 0 where the driver does not know it (older drivers). */
static int attribute(const struct cudadrv *drv, CUdevice dev, CUdevice_attribute a)
{
	int v = 0;

	return drv->cuDeviceGetAttribute(&v, a, dev) == CUDA_SUCCESS ? v : 0;
}

int cudadrv_check_device(const struct cudadrv *drv, CUdevice dev, unsigned need, char *why, size_t whysize)
{
	int mode = attribute(drv, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_MODE);

	if (mode == CU_COMPUTEMODE_PROHIBITED) {
		snprintf(why, whysize, "the GPU's compute mode is PROHIBITED: no process may use it (nvidia-smi -c)");
		return -EPERM;
	}
	if (mode == CU_COMPUTEMODE_EXCLUSIVE_PROCESS && (need & CUDADRV_NEED_SHARE)) {
		snprintf(why, whysize,
			 "the GPU's compute mode is EXCLUSIVE_PROCESS: only one process may hold a context there, "
			 "and GPU delivery needs one in stokerd besides the trainer's (nvidia-smi -c DEFAULT, or "
			 "attach without device= and use pin_memory)");
		return -EPERM;
	}
	if (need & CUDADRV_NEED_RING) {
		if (!attribute(drv, dev, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)) {
			snprintf(why, whysize,
				 "the GPU does not support CUDA's virtual memory management "
				 "(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED), which the device ring is made with");
			return -ENOTSUP;
		}
		if (!attribute(drv, dev, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)) {
			snprintf(why, whysize,
				 "the GPU cannot share memory through POSIX file descriptors "
				 "(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED), how the device ring reaches "
				 "the trainer");
			return -ENOTSUP;
		}
		if (!attribute(drv, dev, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS)) {
			snprintf(why, whysize,
				 "the GPU does not support 64-bit stream memory operations "
				 "(CAN_USE_64_BIT_STREAM_MEM_OPS: cuStreamWaitValue64/cuStreamWriteValue64), "
				 "which order the device ring's slots");
			return -ENOTSUP;
		}
	}
	if ((need & CUDADRV_NEED_POOLS) && !attribute(drv, dev, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)) {
		snprintf(why, whysize,
			 "the GPU does not support stream-ordered allocation (MEMORY_POOLS_SUPPORTED), "
			 "which float output's staging buffer uses");
		return -ENOTSUP;
	}
	return 0;
}
#else
int cudadrv_get(const struct cudadrv **out, const char **why)
{
	(void)out;
	*why = "stoker was built without CUDA (no CUDA toolkit at build time)";
	return -ENOSYS;
}
#endif
