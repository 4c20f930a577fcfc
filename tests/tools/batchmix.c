/* SPDX-License-Identifier: MIT */
/*
 * batchmix: the batch ops' draws alone (daemon/pixels/batchmix.h), for the
 * distribution tests (tests/batchops/).
 *
 *   batchmix [-s SEED] [-c COUNT] [-g WxH] -n N TEXT
 *       parse TEXT (a batch_transform), draw N batches of COUNT images of
 *       WxH from the streams (SEED, 0, b, RNG_BATCHMIX), b = 0..N-1, and
 *       write every sample's record (struct batchmix_rec, 40 bytes) to
 *       stdout, N * COUNT of them.
 *   batchmix -b A,B [-s SEED] -n N
 *       N Beta(A, B) draws as float64 to stdout.
 *   batchmix -T DTYPE [-c COUNT] [-g WxH] -n N TEXT
 *       time N batches' draw + batchmix_apply on a COUNT-image batch of
 *       DTYPE (uint8, float32, float16) in memory; print the CPU ns per
 *       image (the process's CPU time: on a loaded machine the wall time
 *       counts the waits for a core)
 *       (bench/batchops.py).
 *
 * Exit status 2 when TEXT is refused, its message on stderr.
 */
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batchmix.h"

int main(int argc, char **argv)
{
	unsigned long long seed = 0, n = 0;
	unsigned w = 224, h = 224, count = 1;
	double a = 0, b = 0;
	bool beta = false;
	int timing = -1;
	struct batchmix m;
	struct batchmix_rec *recs;
	char err[256];
	int opt;

	while ((opt = getopt(argc, argv, "s:c:g:n:b:T:")) != -1) {
		switch (opt) {
		case 'T':
			timing = !strcmp(optarg, "uint8")     ? DTYPE_UINT8
				 : !strcmp(optarg, "float16") ? DTYPE_FLOAT16
							      : DTYPE_FLOAT32;
			break;
		case 's': seed = strtoull(optarg, NULL, 10); break;
		case 'c': count = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'g':
			if (sscanf(optarg, "%ux%u", &w, &h) != 2)
				return 1;
			break;
		case 'n': n = strtoull(optarg, NULL, 10); break;
		case 'b':
			if (sscanf(optarg, "%lf,%lf", &a, &b) != 2)
				return 1;
			beta = true;
			break;
		default:
			fprintf(stderr, "usage: batchmix [-s SEED] [-c COUNT] [-g WxH] -n N TEXT | -b A,B -n N\n");
			return 1;
		}
	}
	if (beta) {
		struct rng r;

		rng_init(&r, seed, 0, 0, RNG_BATCHMIX);
		for (unsigned long long i = 0; i < n; i++) {
			double v = batchmix_beta(&r, a, b);

			fwrite(&v, sizeof(v), 1, stdout);
		}
		return 0;
	}
	if (optind >= argc || count == 0) {
		fprintf(stderr, "batchmix: no TEXT\n");
		return 1;
	}
	if (batchmix_parse(argv[optind], &m, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s\n", err);
		return 2;
	}
	recs = calloc(count, sizeof(*recs));
	if (!recs)
		return 1;
	if (timing >= 0) {
		size_t bytes = (size_t)w * h * 3 * sample_dtype_bytes((enum sample_dtype)timing);
		uint8_t *images = calloc(count, bytes), *scratch = malloc(bytes);
		int64_t *labels = calloc(count, sizeof(*labels));
		float *soft = calloc((size_t)count * 1000, sizeof(*soft));
		struct timespec t0, t1;

		if (!images || !scratch || !labels || !soft)
			return 1;
		/* normalised-looking values (no denormals) for the float dtypes */
		for (size_t i = 0; i < (size_t)count * bytes / sample_dtype_bytes((enum sample_dtype)timing); i++) {
			float v = (float)((i * 131 >> 3) & 255) / 255.0f * 4.0f - 2.0f;

			if (timing == DTYPE_UINT8)
				images[i] = (uint8_t)(i * 131 >> 3);
			else if (timing == DTYPE_FLOAT32)
				memcpy(images + 4 * i, &v, 4);
#ifdef __FLT16_MAX__
			else {
				_Float16 hv = (_Float16)v;

				memcpy(images + 2 * i, &hv, 2);
			}
#endif
		}
		clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
		for (unsigned long long i = 0; i < n; i++) {
			struct rng r;

			rng_init(&r, seed, 0, i, RNG_BATCHMIX);
			batchmix_draw(&m, &r, count, w, h, recs);
			batchmix_apply(&m, recs, count, images, (enum sample_dtype)timing, w, h, labels, 1000, soft,
				       scratch);
		}
		clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
		printf("%.0f\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / ((double)n * count));
		return 0;
	}
	for (unsigned long long i = 0; i < n; i++) {
		struct rng r;

		rng_init(&r, seed, 0, i, RNG_BATCHMIX);
		batchmix_draw(&m, &r, count, w, h, recs);
		fwrite(recs, sizeof(*recs), count, stdout);
	}
	free(recs);
	return 0;
}
