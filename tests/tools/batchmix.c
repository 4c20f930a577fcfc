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
 *       time N batches' draw + mix of a COUNT-image batch of DTYPE (uint8,
 *       float32, float16) in memory, and print two CPU ns per image (the
 *       process's CPU time: on a loaded machine the wall time counts the
 *       waits for a core): batchmix_apply on the whole batch once it is
 *       written, and the daemon's way, each image mixed as it is written
 *       (batchmix_written after the image's bytes are copied in, in
 *       batchmix_order: the copy stands for the pipeline writing it, and
 *       the copies alone, timed in alternate rounds, are subtracted)
 *       (bench/batchops.py).
 *
 * Exit status 2 when TEXT is refused, its message on stderr.
 */
#include <math.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batchmix.h"

static double elapsed(struct timespec t0, struct timespec t1)
{
	return (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
}

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
		{
			uint8_t *src = malloc((size_t)count * bytes);
			atomic_uchar *state = malloc(count);
			double apply_ns = 1e300, copy_ns = 1e300, inc_ns = 1e300;

			if (!src || !state)
				return 1;
			memcpy(src, images, (size_t)count * bytes);
			/* the best of 5 rounds of each (the machine may be shared) */
			for (int round = 0; round < 5; round++) {
				clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
				for (unsigned long long i = 0; i < n; i++) {
					struct rng r;

					rng_init(&r, seed, 0, i, RNG_BATCHMIX);
					batchmix_draw(&m, &r, count, w, h, recs);
					batchmix_apply(&m, recs, count, images, (enum sample_dtype)timing, w, h, labels,
						       1000, soft, scratch);
				}
				clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
				apply_ns = fmin(apply_ns, elapsed(t0, t1));
				for (int mixing = 0; mixing < 2; mixing++) {
					clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
					for (unsigned long long i = 0; i < n; i++) {
						struct batchmix_progress p;
						struct rng r;

						rng_init(&r, seed, 0, i, RNG_BATCHMIX);
						batchmix_draw(&m, &r, count, w, h, recs);
						batchmix_start(&p, &m, recs, count, images, (enum sample_dtype)timing,
							       w, h, scratch, state);
						for (unsigned k = 0; k < count; k++) {
							size_t at = (size_t)batchmix_order(&m, count, k) * bytes;

							memcpy(images + at, src + at, bytes);
							if (mixing)
								batchmix_written(&p, (uint32_t)(at / bytes), true);
						}
						if (mixing)
							batchmix_soft_targets(&m, recs, count, labels, 1000, soft);
					}
					clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
					if (mixing)
						inc_ns = fmin(inc_ns, elapsed(t0, t1));
					else
						copy_ns = fmin(copy_ns, elapsed(t0, t1));
				}
			}
			printf("%.0f %.0f\n", apply_ns / ((double)n * count),
			       fmax(inc_ns - copy_ns, 0) / ((double)n * count));
			free(src);
			free(state);
		}
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
