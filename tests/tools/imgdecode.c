/* SPDX-License-Identifier: MIT */
/*
 * imgdecode [-m MAX_PIXELS] FILE...: decode each FILE whole as the workers
 * do (by its content: daemon/formats/image.h, or the JPEG decoder), all with one
 * pipeline as a worker reuses its own, and write for each to stdout either
 * "W H\n" and W*H*3 bytes of RGB, or "! CODE reason\n" (CODE 2 for a file
 * refused as bad, EBADMSG; 3 over the pixel limit, E2BIG; 1 otherwise).
 * For the tests to compare with Pillow's convert("RGB").
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "augment.h"

static int one(struct pipeline *p, const char *path)
{
	struct pipeline_image img;
	uint8_t *data = NULL, *rgb = NULL;
	long len;
	FILE *f;
	int r;

	f = fopen(path, "rbe");
	if (!f || fseek(f, 0, SEEK_END) < 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) < 0 ||
	    !(data = malloc((size_t)len + 1)) || fread(data, 1, (size_t)len, f) != (size_t)len) {
		printf("! 1 %s: %s\n", path, strerror(errno));
		goto out;
	}
	r = pipeline_decode_image(p, data, (size_t)len, 0, &img);
	if (r < 0) {
		printf("! %d %s\n", r == -EBADMSG ? 2 : r == -E2BIG ? 3 : 1, pipeline_error(p));
		goto out;
	}
	rgb = malloc((size_t)img.width * 3);
	if (!rgb) {
		printf("! 1 out of memory\n");
		goto out;
	}
	printf("%u %u\n", img.width, img.height);
	for (uint32_t y = 0; y < img.height; y++) {
		for (uint32_t x = 0; x < img.width; x++)
			memcpy(rgb + x * 3, img.pixels + y * img.stride + x * 4, 3);
		fwrite(rgb, 3, img.width, stdout);
	}
out:
	free(rgb);
	if (f)
		fclose(f);
	free(data);
	return 0;
}

int main(int argc, char **argv)
{
	struct decode_limits lim = {0};
	struct pipeline *p = NULL;
	int opt;

	while ((opt = getopt(argc, argv, "m:")) != -1) {
		if (opt != 'm') {
			fprintf(stderr, "usage: imgdecode [-m MAX_PIXELS] FILE...\n");
			return 1;
		}
		lim.max_pixels = strtoull(optarg, NULL, 10);
	}
	if (pipeline_new(&lim, &p) < 0)
		return 1;
	for (int i = optind; i < argc; i++)
		one(p, argv[i]);
	pipeline_free(p);
	return fflush(stdout) == 0 ? 0 : 1;
}
