/* SPDX-License-Identifier: MIT */
/* The fake driver's other entry points (fake_libcuda.c): every name of
 * CUDADRV_SYMBOLS, as the preprocessor versions it (fake_stubs.inc, made by
 * the Makefile), answering CUDA_ERROR_NOT_SUPPORTED (801). Weak: the
 * fake's real ones win. No cuda.h here: the stubs take no arguments. */
#define FAKE_STUB(name)                                              \
	__attribute__((weak, visibility("default"))) int name(void); \
	int name(void)                                               \
	{                                                            \
		return 801;                                          \
	}
#include "fake_stubs.inc"
