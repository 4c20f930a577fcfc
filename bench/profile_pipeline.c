/* SPDX-License-Identifier: MIT */
/*
 * Per-sample cost of the daemon's pipeline without the daemon: one thread
 * runs pipeline_run() (daemon/pixels/augment.h, linked from build/libstokerd.a)
 * over the files, and a full libturbojpeg RGB decode of the same files for
 * comparison. Small enough to run under valgrind --tool=callgrind.
 *
 *     profile_pipeline [--epochs N] [--mode all|rrc|center|center-dct|full] [--size 224] FILE... | -
 *
 * rrc and center-dct decode large crops at a DCT reduction; center does not
 * (the daemon's defaults: center_crop keeps PIL's pixels).
 *
 * Prints one JSON object: ms per image for each mode run.
 */
#include <stdint.h>

#include "augment.h"
#include "bench_files.h"
#include "rng.h"

/* Seconds for `epochs` passes of pipeline_run over the files. */
static double run_pipeline(const struct bench_file *files, size_t n, int epochs, enum transform_kind kind,
			   uint32_t size, bool dct_scaling)
{
	struct decode_limits lim = {.max_pixels = 0, .max_scans = 0};
	struct transform_spec spec = {.kind = kind, .image_size = size, .dct_scaling = dct_scaling};
	struct pipeline *p;
	uint8_t *out = malloc((size_t)size * size * 3);

	if (!out || pipeline_new(&lim, &p) < 0) {
		fprintf(stderr, "profile_pipeline: pipeline_new failed\n");
		exit(1);
	}
	double t0 = bench_now();
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
	double dt = bench_now() - t0;
	pipeline_free(p);
	free(out);
	return dt;
}

/* Seconds for `epochs` passes of a full tjDecompress2 to RGB. */
static double run_full(const struct bench_file *files, size_t n, int epochs)
{
	tjhandle tj = tjInitDecompress();
	unsigned char *buf = NULL;
	size_t cap = 0;
	double t0 = bench_now();

	for (int e = 0; e < epochs; e++)
		if (!tj || bench_decode_all(tj, files, n, &buf, &cap, "profile_pipeline") < 0)
			exit(1);
	double dt = bench_now() - t0;
	tjDestroy(tj);
	free(buf);
	return dt;
}

int main(int argc, char **argv)
{
	int epochs = 1;
	const char *mode = "all";
	uint32_t size = 224;
	struct bench_file *files = NULL;
	size_t n = 0;
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
	if (bench_load_files(argc, argv, a, "profile_pipeline", &files, &n) < 0)
		return 1;
	if (n == 0 || epochs < 1)
		goto usage;

	int all = !strcmp(mode, "all");
	double images = (double)n * epochs;
	printf("{\"files\": %zu, \"epochs\": %d, \"size\": %u", n, epochs, size);
	if (all || !strcmp(mode, "full"))
		printf(", \"full_decode_ms\": %.4f", run_full(files, n, epochs) / images * 1e3);
	if (all || !strcmp(mode, "rrc"))
		printf(", \"random_resized_crop_ms\": %.4f",
		       run_pipeline(files, n, epochs, TRANSFORM_RANDOM_RESIZED_CROP, size, true) / images * 1e3);
	if (all || !strcmp(mode, "center"))
		printf(", \"center_crop_ms\": %.4f",
		       run_pipeline(files, n, epochs, TRANSFORM_CENTER_CROP, size, false) / images * 1e3);
	if (all || !strcmp(mode, "center-dct"))
		printf(", \"center_crop_dct_ms\": %.4f",
		       run_pipeline(files, n, epochs, TRANSFORM_CENTER_CROP, size, true) / images * 1e3);
	printf("}\n");
	bench_free_files(files, n);
	return 0;
usage:
	fprintf(stderr, "usage: profile_pipeline [--epochs N] [--mode all|rrc|center|center-dct|full] [--size N] "
			"FILE... | -\n");
	return 2;
}
