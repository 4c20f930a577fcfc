/* SPDX-License-Identifier: MIT */
/*
 * imgdecode FILE [MAX_PIXELS]: decode FILE whole as the workers do (by its
 * content: daemon/image.h, or the JPEG decoder) and write "W H\n" and then
 * W*H*3 bytes of RGB to stdout, for the tests to compare with Pillow's
 * convert("RGB"). On failure: the reason on stderr, exit status 2 for a
 * file refused as bad (EBADMSG), 3 for one over the pixel limit (E2BIG),
 * 1 otherwise.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "augment.h"

int main(int argc, char **argv)
{
	struct decode_limits lim = {0};
	struct pipeline_image img;
	struct pipeline *p = NULL;
	uint8_t *data = NULL;
	long len;
	FILE *f;
	int r;

	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: imgdecode FILE [MAX_PIXELS]\n");
		return 1;
	}
	if (argc == 3)
		lim.max_pixels = strtoull(argv[2], NULL, 10);
	f = fopen(argv[1], "rbe");
	if (!f || fseek(f, 0, SEEK_END) < 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) < 0) {
		perror(argv[1]);
		return 1;
	}
	data = malloc((size_t)len + 1);
	if (!data || fread(data, 1, (size_t)len, f) != (size_t)len) {
		perror(argv[1]);
		return 1;
	}
	fclose(f);
	if (pipeline_new(&lim, &p) < 0)
		return 1;
	r = pipeline_decode_image(p, data, (size_t)len, 0, &img);
	if (r < 0) {
		fprintf(stderr, "%s\n", pipeline_error(p));
		pipeline_free(p);
		free(data);
		return r == -EBADMSG ? 2 : r == -E2BIG ? 3 : 1;
	}
	printf("%u %u\n", img.width, img.height);
	for (uint32_t y = 0; y < img.height; y++)
		for (uint32_t x = 0; x < img.width; x++)
			fwrite(img.pixels + y * img.stride + x * 4, 1, 3, stdout);
	pipeline_free(p);
	free(data);
	return fflush(stdout) == 0 ? 0 : 1;
}
