/* SPDX-License-Identifier: MIT */
/* The conversion kernels (gpu_convert.cu) as nvcc built them: a fatbin,
 * embedded by the Makefile (built with CUDA only). */
#ifndef STOKER_GPU_FATBIN_H
#define STOKER_GPU_FATBIN_H

#include <stddef.h>

extern const unsigned char gpu_convert_fatbin[];
extern const size_t gpu_convert_fatbin_size;

#endif
