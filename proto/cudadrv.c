/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
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

static struct cudadrv driver;
static int driver_err;
static char driver_why[256];
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;

#define CUDADRV_STR2(x) #x
#define CUDADRV_STR(x) CUDADRV_STR2(x)

static void driver_load(void)
{
	CUresult r;

	/* RTLD_LOCAL: the driver's symbols stay out of the process's namespace,
	 * so a trainer's own CUDA runtime finds its own copy undisturbed (the
	 * same library: dlopen returns the one already loaded). */
	driver.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!driver.lib) {
		const char *e = dlerror();

		driver_err = -ENOENT;
		snprintf(driver_why, sizeof(driver_why), "no CUDA driver on this node (%s)", e ? e : "libcuda.so.1");
		return;
	}
#define CUDADRV_RESOLVE(name)                                                                                  \
	if (!driver_err) {                                                                                     \
		*(void **)&driver.name = dlsym(driver.lib, CUDADRV_STR(name));                                 \
		if (!driver.name) {                                                                            \
			driver_err = -ENOTSUP;                                                                 \
			snprintf(driver_why, sizeof(driver_why), "the CUDA driver is too old: it lacks %s",    \
				 CUDADRV_STR(name));                                                           \
		}                                                                                      \
	}
	CUDADRV_SYMBOLS(CUDADRV_RESOLVE)
#undef CUDADRV_RESOLVE
	if (driver_err)
		return;
	r = driver.cuInit(0);
	if (r != CUDA_SUCCESS) {
		driver_err = -ENODEV;
		snprintf(driver_why, sizeof(driver_why), "CUDA is not usable on this node: cuInit: %s",
			 cudadrv_error(&driver, r));
		return;
	}
	if (driver.cuDriverGetVersion(&driver.version) != CUDA_SUCCESS)
		driver.version = 0;
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
	pthread_once(&driver_once, driver_load);
	if (driver_err) {
		*why = driver_why;
		return driver_err;
	}
	*out = &driver;
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
