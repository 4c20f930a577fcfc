/* SPDX-License-Identifier: MIT */
/*
 * copypaste: daemon/pixels/copypaste.h on raw arrays, for
 * tests/ultralytics/test_copypaste.py against Ultralytics' CopyPaste and
 * cv2.drawContours. Input on stdin, output on stdout, native byte order:
 *
 *   copypaste W H NPTS N K MODE
 *     in:  MODE flip:  uint8 image [H][W][3]
 *          MODE mixup: uint8 image [H][W][3], the other image [H][W][3]
 *          (mixup-ud, mixup-lr, mixup-udlr: both images given flipped that
 *          way, copypaste_image_flipped; the output is then flipped too)
 *          MODE mask:  nothing
 *          then float32 polygons [N][NPTS][2] (pixels), uint32 chosen [K]
 *     out: the image after the paste [H][W][3]; MODE mask: the mask
 *          [H][W] (1 under the chosen polygons, else 0)
 *
 * The image is pasted a row at a time (copypaste_row) for flip, whole
 * (copypaste_image) for mixup and mask: both paths are tested.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "copypaste.h"

static void *take(size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);

	if (!p || (bytes && fread(p, 1, bytes, stdin) != bytes)) {
		fprintf(stderr, "copypaste: short input\n");
		exit(2);
	}
	return p;
}

int main(int argc, char **argv)
{
	struct copypaste *c;
	uint32_t w, h, npts, n, k;
	size_t px;
	uint8_t *img = NULL, *other = NULL;
	bool ud = false, lr = false;
	float *seg;
	uint32_t *chosen;
	int r;

	if (argc != 7 || copypaste_new(&c) < 0)
		return 2;
	w = (uint32_t)atoi(argv[1]);
	h = (uint32_t)atoi(argv[2]);
	npts = (uint32_t)atoi(argv[3]);
	n = (uint32_t)atoi(argv[4]);
	k = (uint32_t)atoi(argv[5]);
	px = (size_t)w * h;
	if (!strcmp(argv[6], "mask")) {
		img = calloc(px * 3 + 1, 1);
		other = malloc(px * 3 + 1);
		if (!img || !other)
			return 2;
		memset(other, 1, px * 3);
	} else {
		img = take(px * 3);
		if (!strncmp(argv[6], "mixup", 5)) {
			other = take(px * 3);
			ud = strstr(argv[6], "ud") != NULL;
			lr = strstr(argv[6], "lr") != NULL;
		} else if (strcmp(argv[6], "flip")) {
			return 2;
		}
	}
	seg = take((size_t)n * npts * 8);
	chosen = take((size_t)k * 4);
	for (uint32_t i = 0; i < k; i++)
		if (chosen[i] >= n)
			return 2;
	r = copypaste_mask(c, w, h, seg, npts, chosen, k);
	if (r == 0) {
		if (other && (ud || lr))
			copypaste_image_flipped(c, img, (size_t)w * 3, other, (size_t)w * 3, ud, lr);
		else if (other)
			copypaste_image(c, img, (size_t)w * 3, other, (size_t)w * 3);
		else
			for (uint32_t y = 0; y < h; y++)
				copypaste_row(c, y, img + (size_t)y * w * 3, NULL);
		if (!strcmp(argv[6], "mask"))
			for (size_t i = 0; i < px; i++)
				putchar(img[i * 3]);
		else
			fwrite(img, 3, px, stdout);
	}
	free(img);
	free(other);
	free(seg);
	free(chosen);
	copypaste_free(c);
	return r < 0 ? 1 : 0;
}
