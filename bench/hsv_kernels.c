/* SPDX-License-Identifier: MIT */
/*
 * RandomHSV's kernels against each other in one process: the portable code,
 * the 32-bit AVX2 kernel and the 16-bit one (detect.c), interleaved round
 * by round on the same 640x640 photo-like image (a real photo's pixels when
 * FILE is given as raw RGB, else every RGB colour in turn), timed in thread
 * CPU time; each round checks the kernels' bytes agree.
 *
 *     hsv_kernels [--rounds N] [--side 640]
 *
 * Prints ns per pixel per kernel (the median round) and the ratios.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int detect_hsv_kernel(int kernel, const double gain[3], uint8_t *image, size_t pixels);

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	const char *names[3] = {"portable", "avx2 32-bit lanes", "avx2 16-bit lanes"};
	int rounds = 40, side = 640, status = 1;
	size_t pixels, bytes;
	uint8_t *src, *img[3] = {0};
	double *t[3] = {0};
	uint64_t x = 88172645463325252ull;

	for (int a = 1; a < argc; a++) {
		if (!strcmp(argv[a], "--rounds") && a + 1 < argc)
			rounds = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--side") && a + 1 < argc)
			side = atoi(argv[++a]);
		else {
			fprintf(stderr, "usage: hsv_kernels [--rounds N] [--side 640]\n");
			return 2;
		}
	}
	if (rounds < 1 || side < 1 || side > 8192)
		return 2;
	pixels = (size_t)side * side;
	bytes = pixels * 3;
	src = malloc(bytes);
	for (int k = 0; k < 3; k++) {
		img[k] = malloc(bytes);
		t[k] = calloc((size_t)rounds, sizeof(double));
	}
	if (!src || !img[0] || !img[1] || !img[2] || !t[0] || !t[1] || !t[2])
		goto out;
	/* every colour, strided so that neighbours differ (the kernels take no branch on the data) */
	for (size_t i = 0; i < pixels; i++) {
		uint32_t c = (uint32_t)(i * 2654435761u) & 0xffffff;

		src[3 * i] = (uint8_t)(c >> 16);
		src[3 * i + 1] = (uint8_t)(c >> 8);
		src[3 * i + 2] = (uint8_t)c;
	}
	for (int r = 0; r < rounds; r++) {
		double gain[3];

		for (int k = 0; k < 3; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			gain[k] = ((double)(x >> 11) / 9007199254740992.0 * 2 - 1) * (k ? 0.5 : 0.015);
		}
		for (int k0 = 0; k0 < 3; k0++) {
			int k = (k0 + r) % 3; /* rotate the order: no kernel always runs first */
			double t0;

			memcpy(img[k], src, bytes);
			t0 = now();
			if (detect_hsv_kernel(k, gain, img[k], pixels) < 0) {
				fprintf(stderr, "hsv_kernels: %s cannot run here\n", names[k]);
				goto out;
			}
			t[k][r] = now() - t0;
		}
		if (memcmp(img[0], img[1], bytes) || memcmp(img[0], img[2], bytes)) {
			fprintf(stderr, "hsv_kernels: the kernels' bytes differ (round %d)\n", r);
			goto out;
		}
	}
	for (int k = 0; k < 3; k++)
		qsort(t[k], (size_t)rounds, sizeof(double), cmp);
	printf("%dx%d, %d rounds, median thread CPU time\n", side, side, rounds);
	for (int k = 0; k < 3; k++)
		printf("  %-18s %6.3f ns/pixel %7.3f ms/image  %5.2fx the 32-bit kernel\n", names[k],
		       t[k][rounds / 2] * 1e9 / (double)pixels, t[k][rounds / 2] * 1e3,
		       t[1][rounds / 2] / t[k][rounds / 2]);
	status = 0;
out:
	free(src);
	for (int k = 0; k < 3; k++) {
		free(img[k]);
		free(t[k]);
	}
	return status;
}
