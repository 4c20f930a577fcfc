/* SPDX-License-Identifier: MIT */
/*
 * What the pixel-op modules (pixelops.c, policy.c) share and nothing else
 * sees: the per-worker scratch, its grow-only buffers, the draw trace the
 * distribution tests read, and parameter parsing with errors that name
 * the op and the parameter.
 */
#ifndef STOKER_PIXELOPS_INT_H
#define STOKER_PIXELOPS_INT_H

#include <stdbool.h>
#include <stdio.h>

#include "pixelops.h"

struct pixel_scratch {
	uint8_t *img[4]; /* images of the current size, for ops that need a copy */
	size_t img_cap[4];
	float *f; /* float planes (blur, AugMix's mix) */
	size_t f_cap;
	FILE *trace; /* draws written here when set (tests/tools/pixelop.c) */
};

/* Scratch image i (0..3) of im's size, packed with im's stride; NULL when out of memory. */
uint8_t *scratch_image(struct pixel_scratch *s, unsigned i, const struct rgb_image *im);
/* At least n floats; NULL when out of memory. */
float *scratch_floats(struct pixel_scratch *s, size_t n);
/* Record a draw ("name value") when tracing. */
void pixel_trace(struct pixel_scratch *s, const char *name, double value);

/* Parameter lookup for one op; errors say "OP: parameter KEY ...". */
struct params {
	const char *op;
	const struct op_param *p;
	size_t n;
	char *err;
	size_t errlen;
};

/* -EINVAL with a message when a key is not one of `keys` (NULL-terminated). */
int params_check_keys(const struct params *ps, const char *const *keys);
const struct op_param *params_find(const struct params *ps, const char *key);
int params_fail(const struct params *ps, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A number in [lo, hi] (def when absent). */
int params_number(const struct params *ps, const char *key, double def, double lo, double hi, double *out);
/* An integer in [lo, hi] (def when absent). */
int params_int(const struct params *ps, const char *key, long def, long lo, long hi, long *out);
/* A boolean: true / false (any case) or 1 / 0 (def when absent). */
int params_bool(const struct params *ps, const char *key, bool def, bool *out);
/* A probability (def when absent). */
int params_prob(const struct params *ps, const char *key, double def, double *out);
/* A text (def when absent; may be NULL). */
int params_text(const struct params *ps, const char *key, const char *def, const char **out);
/* A fill: absent or none -> 0; a number; or 3 numbers, each 0..255. */
int params_fill(const struct params *ps, const char *key, uint8_t fill[3]);

/* The ops that need scratch, for the policies too. 0 or -ENOMEM. */
int gaussian_blur(struct rgb_image *im, unsigned kx, unsigned ky, double sx, double sy, struct pixel_scratch *s);
int sharpness(struct rgb_image *im, double factor, struct pixel_scratch *s);

#endif
