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
 *
 * Exit status 2 when TEXT is refused, its message on stderr.
 */
#include <stdio.h>
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
	struct batchmix m;
	struct batchmix_rec *recs;
	char err[256];
	int opt;

	while ((opt = getopt(argc, argv, "s:c:g:n:b:")) != -1) {
		switch (opt) {
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
	for (unsigned long long i = 0; i < n; i++) {
		struct rng r;

		rng_init(&r, seed, 0, i, RNG_BATCHMIX);
		batchmix_draw(&m, &r, count, w, h, recs);
		fwrite(recs, sizeof(*recs), count, stdout);
	}
	free(recs);
	return 0;
}
