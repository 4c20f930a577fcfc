/* SPDX-License-Identifier: MIT */
/*
 * instmask: daemon/pixels/instmask.h on raw arrays, for the tests against
 * Ultralytics' and cv2's functions (tests/ultralytics/test_instmask.py).
 * Input on stdin, output on stdout, native byte order:
 *
 *   instmask resample M       in: uint32 n, float32 [n][2]; out: float32 [M][2]
 *   instmask fill W H         in: uint32 n, int32 [n][2];   out: uint8 [H][W]
 *   instmask overlap W H R [W H R ...]
 *                             in, per W H R: uint32 count, then per polygon
 *                             uint32 n, float32 [n][2] (pixels); out, per W H
 *                             R: uint16 [H/R][W/R], uint32 [count] (the area
 *                             order); one struct instmask for all
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "instmask.h"

static void *take(size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);

	if (!p || (bytes && fread(p, 1, bytes, stdin) != bytes)) {
		fprintf(stderr, "instmask: short input\n");
		exit(2);
	}
	return p;
}

static uint32_t u32(void)
{
	uint32_t *p = take(4), v = *p;

	free(p);
	return v;
}

int main(int argc, char **argv)
{
	struct instmask *m;
	int r = 0;

	if (argc < 3 || instmask_new(&m) < 0)
		return 2;
	if (!strcmp(argv[1], "resample")) {
		uint32_t mm = (uint32_t)atoi(argv[2]), n = u32();
		float *in = take((size_t)n * 8), *out = malloc((size_t)mm * 8);

		instmask_resample(in, n, mm, out);
		fwrite(out, 8, mm, stdout);
		free(in);
		free(out);
	} else if (!strcmp(argv[1], "fill") && argc == 4) {
		uint32_t w = (uint32_t)atoi(argv[2]), h = (uint32_t)atoi(argv[3]), n = u32();
		int32_t *pts = take((size_t)n * 8);
		uint8_t *mask = calloc((size_t)w * h, 1);

		r = instmask_fill(m, mask, w, h, pts, n);
		fwrite(mask, 1, (size_t)w * h, stdout);
		free(pts);
		free(mask);
	} else if (!strcmp(argv[1], "overlap") && argc >= 5 && (argc - 2) % 3 == 0) {
		/* one problem a W H R triple, in turn, through the one struct instmask (as a worker uses it) */
		for (int a = 2; a + 2 < argc && r >= 0; a += 3) {
			uint32_t w = (uint32_t)atoi(argv[a]), h = (uint32_t)atoi(argv[a + 1]),
				 k = (uint32_t)atoi(argv[a + 2]);
			uint32_t count = u32(), *off = malloc(((size_t)count + 1) * 4),
				 *order = malloc((size_t)count * 4 + 4);
			uint16_t *mask = malloc((size_t)(w / k) * (h / k) * 2 + 2);
			float *xy = NULL;
			size_t total = 0;

			for (uint32_t i = 0; i < count; i++) {
				uint32_t n = u32();
				float *pts = take((size_t)n * 8);

				xy = realloc(xy, (total + n) * 8 + 8);
				memcpy(xy + total * 2, pts, (size_t)n * 8);
				off[i] = (uint32_t)total;
				total += n;
				free(pts);
			}
			off[count] = (uint32_t)total;
			r = instmask_overlap(m, xy, off, count, w, h, k, mask, order);
			fwrite(mask, 2, (size_t)(w / k) * (h / k), stdout);
			fwrite(order, 4, count, stdout);
			free(mask);
			free(xy);
			free(off);
			free(order);
		}
	} else {
		return 2;
	}
	instmask_free(m);
	return r < 0 ? 1 : 0;
}
