/* SPDX-License-Identifier: MIT */
/*
 * pixelop: one pixel op (daemon/pixels/pixelops.h) on one image, for the
 * parity and distribution tests (tests/transforms/test_pixel_ops.py).
 *
 *   pixelop [-s SEED] [-i INDEX] [-f FILE | -g WxH] OP [KEY=VALUE...]
 *       apply OP once, drawing from the stream (SEED, 0, INDEX), to FILE
 *       (decoded as the workers do) or a synthetic WxH gradient; write
 *       "W H\n" and W*H*3 bytes of RGB to stdout.
 *   pixelop -n N [-s SEED] [-g WxH] OP [KEY=VALUE...]
 *       apply OP to N samples (indices 0..N-1, a fresh image each) and
 *       print every draw as "name value", a line "." after each sample.
 *   pixelop -p NAME:MAGNITUDE[:INTERP[:FILL]] [-f FILE | -g WxH] POLICY [KEY=VALUE...]
 *       apply the policy's op NAME at MAGNITUDE alone (no draw; signed
 *       magnitudes as given), with the policy's interpolation and fill.
 *
 * VALUE: a number, numbers separated by commas, none, or a text.
 * Exit status 2 when the op is refused, its message on stderr.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "augment.h"
#include "pixelops.h"

#define MAX_PARAMS 16

static int load(const char *path, struct rgb_image *im)
{
	struct pipeline *p = NULL;
	struct pipeline_image img;
	uint8_t *data = NULL;
	long len;
	FILE *f = fopen(path, "rbe");
	int r = -EIO;

	if (!f || fseek(f, 0, SEEK_END) < 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) < 0 ||
	    !(data = malloc((size_t)len + 1)) || fread(data, 1, (size_t)len, f) != (size_t)len)
		goto out;
	if ((r = pipeline_new(NULL, &p)) < 0 || (r = pipeline_decode_image(p, data, (size_t)len, 0, &img)) < 0)
		goto out;
	im->width = img.width;
	im->height = img.height;
	im->stride = (size_t)img.width * 3;
	im->px = malloc(im->stride * img.height);
	r = -ENOMEM;
	if (!im->px)
		goto out;
	for (uint32_t y = 0; y < img.height; y++)
		for (uint32_t x = 0; x < img.width; x++)
			memcpy(im->px + y * im->stride + x * 3, img.pixels + y * img.stride + x * 4, 3);
	r = 0;
out:
	pipeline_free(p);
	free(data);
	if (f)
		fclose(f);
	return r;
}

static int synth(uint32_t w, uint32_t h, struct rgb_image *im)
{
	im->width = w;
	im->height = h;
	im->stride = (size_t)w * 3;
	im->px = malloc(im->stride * h);
	if (!im->px)
		return -ENOMEM;
	for (uint32_t y = 0; y < h; y++)
		for (uint32_t x = 0; x < w; x++) {
			uint8_t *p = im->px + y * im->stride + x * 3;

			p[0] = (uint8_t)(x * 255 / (w > 1 ? w - 1 : 1));
			p[1] = (uint8_t)(y * 255 / (h > 1 ? h - 1 : 1));
			p[2] = (uint8_t)((x * 7 + y * 13) & 255);
		}
	return 0;
}

int main(int argc, char **argv)
{
	struct op_param params[MAX_PARAMS];
	double numbers[MAX_PARAMS][8];
	struct pixel_scratch *scratch = NULL;
	struct pixel_op *op = NULL;
	struct rgb_image im = {0}, work;
	const char *file = NULL, *forced = NULL;
	unsigned long long seed = 0, index = 0, n = 0;
	uint32_t gw = 32, gh = 24;
	size_t np = 0;
	char err[256];
	int opt, r;

	while ((opt = getopt(argc, argv, "s:i:n:f:g:p:")) != -1) {
		switch (opt) {
		case 's': seed = strtoull(optarg, NULL, 0); break;
		case 'i': index = strtoull(optarg, NULL, 0); break;
		case 'n': n = strtoull(optarg, NULL, 0); break;
		case 'f': file = optarg; break;
		case 'g': sscanf(optarg, "%ux%u", &gw, &gh); break;
		case 'p': forced = optarg; break;
		default: fprintf(stderr, "usage: see tests/tools/pixelop.c\n"); return 1;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "pixelop: no op\n");
		return 1;
	}
	for (int a = optind + 1; a < argc && np < MAX_PARAMS; a++, np++) {
		char *eq = strchr(argv[a], '='), *v, *end;
		size_t k = 0;

		if (!eq) {
			fprintf(stderr, "pixelop: %s: KEY=VALUE expected\n", argv[a]);
			return 1;
		}
		*eq = '\0';
		v = eq + 1;
		params[np] = (struct op_param){.key = argv[a], .numbers = numbers[np]};
		if (!strcmp(v, "none"))
			continue;
		for (char *t = v; k < 8; k++) {
			numbers[np][k] = strtod(t, &end);
			if (end == t || (*end && *end != ',')) {
				k = 0;
				break;
			}
			if (!*end) {
				k++;
				break;
			}
			t = end + 1;
		}
		params[np].n_numbers = k;
		if (!k)
			params[np].text = v;
	}
	r = pixel_op_parse(argv[optind], params, np, &op, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "%s\n", err);
		return 2;
	}
	if (pixel_scratch_new(&scratch) < 0)
		return 1;
	r = file ? load(file, &im) : synth(gw, gh, &im);
	if (r < 0) {
		fprintf(stderr, "pixelop: cannot read the image (%d)\n", r);
		return 1;
	}
	work = im;
	work.px = malloc(im.stride * im.height);
	if (!work.px)
		return 1;
	if (n) {
		pixel_scratch_trace(scratch, stdout);
		for (unsigned long long i = 0; i < n; i++) {
			struct rng rng;

			memcpy(work.px, im.px, im.stride * im.height);
			rng_init(&rng, seed, 0, i, RNG_AUGMENT);
			if (pixel_op_apply(op, &work, &rng, scratch) < 0)
				return 1;
			fputs(".\n", stdout);
		}
	} else {
		struct rng rng;

		memcpy(work.px, im.px, im.stride * im.height);
		rng_init(&rng, seed, 0, index, RNG_AUGMENT);
		if (forced)
			r = pixel_op_apply_policy_op(op, forced, &work, scratch, err, sizeof(err));
		else
			r = pixel_op_apply(op, &work, &rng, scratch);
		if (r < 0) {
			fprintf(stderr, "pixelop: %s\n", forced ? err : "apply failed");
			return r == -EINVAL ? 2 : 1;
		}
		printf("%u %u\n", work.width, work.height);
		fwrite(work.px, 1, work.stride * work.height, stdout);
	}
	pixel_op_free(op);
	pixel_scratch_free(scratch);
	free(im.px);
	free(work.px);
	return 0;
}
