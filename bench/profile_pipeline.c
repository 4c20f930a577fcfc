/* SPDX-License-Identifier: MIT */
/*
 * Per-sample cost of the daemon's pipeline without the daemon: one thread
 * runs pipeline_run() (daemon/augment.h, linked from build/libstokerd.a)
 * over the files, and a full libturbojpeg RGB decode of the same files for
 * comparison. Small enough to run under valgrind --tool=callgrind.
 *
 *     profile_pipeline [--epochs N] [--mode all|rrc|center|full] [--size 224] FILE... | -
 *
 * Prints one JSON object: ms per image for each mode run.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <turbojpeg.h>

#include "augment.h"
#include "rng.h"

struct file {
	uint8_t *data;
	size_t len;
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
	f->len = (size_t)n;
	return 0;
}

/* Seconds for `epochs` passes of pipeline_run over the files. */
static double run_pipeline(const struct file *files, size_t n, int epochs, enum transform_kind kind, uint32_t size)
{
	struct decode_limits lim = {.max_pixels = 0, .max_scans = 0};
	struct transform_spec spec = {.kind = kind, .image_size = size};
	struct pipeline *p;
	uint8_t *out = malloc((size_t)size * size * 3);

	if (!out || pipeline_new(&lim, &p) < 0) {
		fprintf(stderr, "profile_pipeline: pipeline_new failed\n");
		exit(1);
	}
	double t0 = now();
	for (int e = 0; e < epochs; e++) {
		for (size_t i = 0; i < n; i++) {
			struct rng rng;

			rng_init(&rng, 0, (uint64_t)e, i, RNG_AUGMENT); /* as the daemon keys it */
			int r = pipeline_run(p, files[i].data, files[i].len, &spec, &rng, out);
			if (r < 0) {
				fprintf(stderr, "profile_pipeline: file %zu: %s\n", i, pipeline_error(p));
				exit(1);
			}
		}
	}
	double dt = now() - t0;
	pipeline_free(p);
	free(out);
	return dt;
}

/* Seconds for `epochs` passes of a full tjDecompress2 to RGB. */
static double run_full(const struct file *files, size_t n, int epochs)
{
	tjhandle tj = tjInitDecompress();
	unsigned char *buf = NULL;
	size_t cap = 0;

	double t0 = now();
	for (int e = 0; e < epochs; e++) {
		for (size_t i = 0; i < n; i++) {
			int w, h, ss, cs;

			if (tjDecompressHeader3(tj, files[i].data, (unsigned long)files[i].len, &w, &h, &ss, &cs) < 0)
				exit(1);
			if ((size_t)w * h * 3 > cap) {
				free(buf);
				cap = (size_t)w * h * 3;
				buf = malloc(cap);
			}
			if (!buf || tjDecompress2(tj, files[i].data, (unsigned long)files[i].len, buf, w, 0, h, TJPF_RGB,
						  0) < 0)
				exit(1);
		}
	}
	double dt = now() - t0;
	tjDestroy(tj);
	free(buf);
	return dt;
}

int main(int argc, char **argv)
{
	int epochs = 1;
	const char *mode = "all";
	uint32_t size = 224;
	struct file *files = NULL;
	size_t n = 0, cap = 0;
	int a = 1;

	for (; a < argc && !strncmp(argv[a], "--", 2); a++) {
		if (!strcmp(argv[a], "--epochs") && a + 1 < argc)
			epochs = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--mode") && a + 1 < argc)
			mode = argv[++a];
		else if (!strcmp(argv[a], "--size") && a + 1 < argc)
			size = (uint32_t)atoi(argv[++a]);
		else
			goto usage;
	}
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
			fprintf(stderr, "profile_pipeline: %s: %s\n", path, strerror(-r));
			return 1;
		}
		n++;
	}
	if (n == 0 || epochs < 1)
		goto usage;

	int all = !strcmp(mode, "all");
	double images = (double)n * epochs;
	printf("{\"files\": %zu, \"epochs\": %d, \"size\": %u", n, epochs, size);
	if (all || !strcmp(mode, "full"))
		printf(", \"full_decode_ms\": %.4f", run_full(files, n, epochs) / images * 1e3);
	if (all || !strcmp(mode, "rrc"))
		printf(", \"random_resized_crop_ms\": %.4f",
		       run_pipeline(files, n, epochs, TRANSFORM_RANDOM_RESIZED_CROP, size) / images * 1e3);
	if (all || !strcmp(mode, "center"))
		printf(", \"center_crop_ms\": %.4f",
		       run_pipeline(files, n, epochs, TRANSFORM_CENTER_CROP, size) / images * 1e3);
	printf("}\n");
	for (size_t i = 0; i < n; i++)
		free(files[i].data);
	free(files);
	return 0;
usage:
	fprintf(stderr, "usage: profile_pipeline [--epochs N] [--mode all|rrc|center|full] [--size N] FILE... | -\n");
	return 2;
}
