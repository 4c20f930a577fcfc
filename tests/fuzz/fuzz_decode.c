/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: one file's bytes through the workers' decode and
 * augment path (daemon/pixels/augment.c, decode.c, resize.c), as a worker runs
 * it: a random resized crop to uint8, a centre crop to normalised float32,
 * and the decoded cache tier's whole-image decode then a float16 crop from
 * it. The pixel cap is lowered so a hostile header cannot make one input
 * allocate gigabytes; the scan limit is the daemon's default.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "augment.h"
#include "rng.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_SIDE 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct pipeline *p;
	static uint8_t out[MAX_SIDE * MAX_SIDE * 3 * 4];
	const struct decode_limits limits = {.max_pixels = 4u << 20, .max_scans = 500};
	struct transform_spec rrc = {.kind = TRANSFORM_RANDOM_RESIZED_CROP,
				     .image_size = 48,
				     .dtype = DTYPE_UINT8,
				     .dct_scaling = true};
	struct transform_spec cc = {.kind = TRANSFORM_CENTER_CROP,
				    .image_size = 32,
				    .dtype = DTYPE_FLOAT32,
				    .mean = {0.485f, 0.456f, 0.406f},
				    .std = {0.229f, 0.224f, 0.225f}};
	struct transform_spec half = cc;
	struct pipeline_image img;
	uint64_t key = size;
	struct rng rng;

	if (!p && pipeline_new(&limits, &p) < 0)
		abort();
	for (size_t i = 0; i < size && i < 64; i++)
		key = key * 131 + data[i];
	rng_init(&rng, key, 0, 0, RNG_AUGMENT);
	pipeline_run(p, data, size, &rrc, &rng, out);
	pipeline_run(p, data, size, &cc, &rng, out);
	half.dtype = DTYPE_FLOAT16;
	half.dct_scaling = true; /* the decoded image may be reduced */
	half.image_size = MAX_SIDE;
	if (pipeline_decode_image(p, data, size, 40, &img) == 0)
		pipeline_run_image(p, &img, &half, &rng, out);
	return 0;
}
