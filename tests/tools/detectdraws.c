/* SPDX-License-Identifier: MIT */
/*
 * detectdraws: the draws of DETECT_TRAIN samples (detect_plan_draws, the
 * plan detect_make draws), for tests/ultralytics/test_rect_train.py to
 * inject into Ultralytics' own RandomPerspective and RandomFlip.
 *
 *   argv:   SIZE DEGREES TRANSLATE SCALE SHEAR PERSPECTIVE FLIPUD FLIPLR
 *           (the other parameters 0: rect training's, no HSV)
 *   stdin:  lines "SEED EPOCH INDEX COUNT", the sample's rng key as the
 *           workers make it (RNG_AUGMENT) and the images of its batch
 *   stdout: per line "persp_x persp_y angle scale shear_x shear_y trans_x
 *           trans_y flipud fliplr" (%.17g): image 1's affine draws in
 *           _compute_affine_matrix's order, then the flips (0 or 1).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "detect.h"
#include "rng.h"


int main(int argc, char **argv)
{
	struct detect_params p = {0};
	uint64_t seed, epoch, index, count;
	uint32_t size;

	if (argc != 9) {
		fprintf(stderr, "usage: detectdraws SIZE DEGREES TRANSLATE SCALE SHEAR PERSPECTIVE FLIPUD FLIPLR\n");
		return 2;
	}
	size = (uint32_t)strtoul(argv[1], NULL, 10);
	p.degrees = strtof(argv[2], NULL);
	p.translate = strtof(argv[3], NULL);
	p.scale = strtof(argv[4], NULL);
	p.shear = strtof(argv[5], NULL);
	p.perspective = strtof(argv[6], NULL);
	p.flipud = strtof(argv[7], NULL);
	p.fliplr = strtof(argv[8], NULL);
	while (scanf("%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64, &seed, &epoch, &index, &count) == 4) {
		struct rng r;
		double v[DETECT_PLAN_DRAWS];

		rng_init(&r, seed, epoch, index, RNG_AUGMENT);
		if (detect_plan_draws(&p, size, count, &r, v) < 0)
			return 1;
		for (int i = 6; i < 14; i++)
			printf("%.17g ", v[i]);
		printf("%.17g %.17g\n", v[30], v[31]);
	}
	return 0;
}
