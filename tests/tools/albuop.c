/* SPDX-License-Identifier: MIT */
/*
 * albuop: Ultralytics' default Albumentations (daemon/pixels/albu.h) on one
 * image, for tests/ultralytics/test_albumentations.py.
 *
 *   albuop blur K | median K | gray | clahe CLIP | lab | lab-inv | lab-turned | lab-inv-turned
 *       read "W H\n" and W*H*3 bytes (RGB) from stdin, apply the op, write
 *       the same form to stdout.
 *   albuop apply P SEED INDEX FLIPUD FLIPLR
 *       the ops drawn from the stream (SEED, 0, INDEX) as the workers draw
 *       them, on an image already flipped as told (0 or 1); the draw on
 *       stderr as albuop draws prints it.
 *   albuop draws N P SEED
 *       N samples' draws, one line each: "blur blur_k median median_k gray
 *       clahe clip".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "albu.h"

static uint8_t *read_image(uint32_t *w, uint32_t *h)
{
	uint8_t *px;
	size_t n;

	if (scanf("%u %u", w, h) != 2 || getchar() != '\n' || !*w || !*h || *w > 16384 || *h > 16384)
		return NULL;
	n = (size_t)*w * *h * 3;
	px = malloc(n);
	if (px && fread(px, 1, n, stdin) != n) {
		free(px);
		return NULL;
	}
	return px;
}

static void print_draw(FILE *f, const struct albu_draw *d)
{
	fprintf(f, "%d %u %d %u %d %d %.17g\n", d->blur, d->blur_k, d->median, d->median_k, d->gray, d->clahe, d->clip);
}

int main(int argc, char **argv)
{
	struct albu *a = NULL;
	struct albu_draw d;
	struct rng r;
	uint32_t w, h;
	uint8_t *px;
	const char *op = argc > 1 ? argv[1] : "";
	int ret = 0;

	if (!strcmp(op, "draws") && argc == 5) {
		unsigned long n = strtoul(argv[2], NULL, 10);

		for (unsigned long i = 0; i < n; i++) {
			rng_init(&r, strtoull(argv[4], NULL, 10), 0, i, RNG_ALBU);
			albu_draw(&r, strtod(argv[3], NULL), &d);
			print_draw(stdout, &d);
		}
		return 0;
	}
	px = read_image(&w, &h);
	if (!px || albu_new(&a) < 0)
		return 1;
	if (!strcmp(op, "blur") && argc == 3)
		ret = albu_blur(a, px, w, h, (uint32_t)strtoul(argv[2], NULL, 10));
	else if (!strcmp(op, "median") && argc == 3)
		ret = albu_median(a, px, w, h, (uint32_t)strtoul(argv[2], NULL, 10));
	else if (!strcmp(op, "gray"))
		albu_gray(px, (size_t)w * h);
	else if (!strcmp(op, "clahe") && argc == 3)
		ret = albu_clahe(a, px, w, h, strtod(argv[2], NULL));
	else if (!strncmp(op, "lab-inv", 7))
		albu_lab2rgb(px, (size_t)w * h, !strcmp(op, "lab-inv-turned"));
	else if (!strncmp(op, "lab", 3))
		albu_rgb2lab(px, (size_t)w * h, !strcmp(op, "lab-turned"));
	else if (!strcmp(op, "apply") && argc == 7) {
		rng_init(&r, strtoull(argv[3], NULL, 10), 0, strtoull(argv[4], NULL, 10), RNG_ALBU);
		albu_draw(&r, strtod(argv[2], NULL), &d);
		print_draw(stderr, &d);
		ret = albu_apply(a, px, w, h, &d, atoi(argv[5]) != 0, atoi(argv[6]) != 0);
	} else
		ret = -EINVAL;
	if (ret == 0) {
		printf("%u %u\n", w, h);
		fwrite(px, 1, (size_t)w * h * 3, stdout);
	}
	albu_free(a);
	free(px);
	return ret < 0 ? 2 : 0;
}
