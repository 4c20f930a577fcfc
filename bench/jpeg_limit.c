/* SPDX-License-Identifier: MIT */
/*
 * The decode limit: one process, one thread, libturbojpeg full decode of
 * every file to packed RGB (no crop, no resize, no DCT scaling). Files are
 * read into memory first, so only decoding is timed.
 *
 *     jpeg_limit [--epochs N] [--min-seconds S] FILE...     (or - : names on stdin)
 *
 * One warm-up epoch, then at least N epochs and at least S seconds. Prints
 * one JSON object: images/s, megapixels/s and the per-file mean.
 */
#include "bench_files.h"

int main(int argc, char **argv)
{
	int min_epochs = 2;
	double min_seconds = 10.0;
	struct bench_file *files = NULL;
	size_t n = 0;
	int a = 1;

	for (; a < argc && argv[a][0] == '-' && argv[a][1] == '-'; a++) {
		if (!strcmp(argv[a], "--epochs") && a + 1 < argc)
			min_epochs = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--min-seconds") && a + 1 < argc)
			min_seconds = atof(argv[++a]);
		else {
			fprintf(stderr, "usage: jpeg_limit [--epochs N] [--min-seconds S] FILE... | -\n");
			return 2;
		}
	}
	if (bench_load_files(argc, argv, a, "jpeg_limit", &files, &n) < 0)
		return 1;
	if (n == 0) {
		fprintf(stderr, "jpeg_limit: no files\n");
		return 2;
	}

	tjhandle tj = tjInitDecompress();
	unsigned char *buf = NULL;
	size_t bufcap = 0;
	if (!tj || bench_decode_all(tj, files, n, &buf, &bufcap, "jpeg_limit") < 0) /* warm-up, not timed */
		return 1;

	int epochs = 0;
	long long pixels = 0;
	double t0 = bench_now(), dt;
	do {
		long long p = bench_decode_all(tj, files, n, &buf, &bufcap, "jpeg_limit");
		if (p < 0)
			return 1;
		pixels += p;
		epochs++;
		dt = bench_now() - t0;
	} while (epochs < min_epochs || dt < min_seconds);

	double images = (double)n * epochs;
	printf("{\"files\": %zu, \"epochs\": %d, \"seconds\": %.3f, \"images_per_second\": %.2f, "
	       "\"megapixels_per_second\": %.2f, \"ms_per_image\": %.4f, \"mean_megapixels\": %.4f}\n",
	       n, epochs, dt, images / dt, (double)pixels / dt * 1e-6, dt / images * 1e3,
	       (double)pixels / images * 1e-6);
	tjDestroy(tj);
	free(buf);
	bench_free_files(files, n);
	return 0;
}
