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
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <turbojpeg.h>

struct file {
	unsigned char *data;
	unsigned long len;
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int read_file(const char *path, struct file *f)
{
	FILE *fp = fopen(path, "rb");
	long n;

	if (!fp)
		return -errno;
	if (fseek(fp, 0, SEEK_END) < 0 || (n = ftell(fp)) <= 0 || fseek(fp, 0, SEEK_SET) < 0) {
		fclose(fp);
		return -EIO;
	}
	f->data = malloc((size_t)n);
	if (!f->data || fread(f->data, 1, (size_t)n, fp) != (size_t)n) {
		fclose(fp);
		return -EIO;
	}
	fclose(fp);
	f->len = (unsigned long)n;
	return 0;
}

/* Decode every file once; returns pixels decoded, or -1 on a decode error. */
static long long epoch(tjhandle tj, const struct file *files, size_t n, unsigned char **buf, size_t *cap)
{
	long long pixels = 0;

	for (size_t i = 0; i < n; i++) {
		int w, h, ss, cs;

		if (tjDecompressHeader3(tj, files[i].data, files[i].len, &w, &h, &ss, &cs) < 0) {
			fprintf(stderr, "jpeg_limit: header %zu: %s\n", i, tjGetErrorStr2(tj));
			return -1;
		}
		size_t need = (size_t)w * (size_t)h * 3;
		if (need > *cap) {
			free(*buf);
			*buf = malloc(need);
			if (!*buf)
				return -1;
			*cap = need;
		}
		/* Same flags as a default decode: accurate IDCT, fancy upsampling. */
		if (tjDecompress2(tj, files[i].data, files[i].len, *buf, w, 0, h, TJPF_RGB, 0) < 0) {
			fprintf(stderr, "jpeg_limit: decode %zu: %s\n", i, tjGetErrorStr2(tj));
			return -1;
		}
		pixels += (long long)w * h;
	}
	return pixels;
}

int main(int argc, char **argv)
{
	int min_epochs = 2;
	double min_seconds = 10.0;
	struct file *files = NULL;
	size_t n = 0, cap = 0;
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
	/* File names from argv, or one per line on stdin with "-". */
	char line[4096];
	int from_stdin = a < argc && !strcmp(argv[a], "-");
	for (;;) {
		const char *path;

		if (from_stdin) {
			if (!fgets(line, sizeof(line), stdin))
				break;
			line[strcspn(line, "\n")] = 0;
			if (!line[0])
				continue;
			path = line;
		} else {
			if (a >= argc)
				break;
			path = argv[a++];
		}
		if (n == cap) {
			cap = cap ? 2 * cap : 1024;
			files = realloc(files, cap * sizeof(*files));
			if (!files)
				return 1;
		}
		int r = read_file(path, &files[n]);
		if (r < 0) {
			fprintf(stderr, "jpeg_limit: %s: %s\n", path, strerror(-r));
			return 1;
		}
		n++;
	}
	if (n == 0) {
		fprintf(stderr, "jpeg_limit: no files\n");
		return 2;
	}

	tjhandle tj = tjInitDecompress();
	unsigned char *buf = NULL;
	size_t bufcap = 0;
	if (!tj || epoch(tj, files, n, &buf, &bufcap) < 0) /* warm-up, not timed */
		return 1;

	int epochs = 0;
	long long pixels = 0;
	double t0 = now(), dt;
	do {
		long long p = epoch(tj, files, n, &buf, &bufcap);
		if (p < 0)
			return 1;
		pixels += p;
		epochs++;
		dt = now() - t0;
	} while (epochs < min_epochs || dt < min_seconds);

	double images = (double)n * epochs;
	printf("{\"files\": %zu, \"epochs\": %d, \"seconds\": %.3f, \"images_per_second\": %.2f, "
	       "\"megapixels_per_second\": %.2f, \"ms_per_image\": %.4f, \"mean_megapixels\": %.4f}\n",
	       n, epochs, dt, images / dt, (double)pixels / dt * 1e-6, dt / images * 1e3,
	       (double)pixels / images * 1e-6);
	tjDestroy(tj);
	free(buf);
	for (size_t i = 0; i < n; i++)
		free(files[i].data);
	free(files);
	return 0;
}
