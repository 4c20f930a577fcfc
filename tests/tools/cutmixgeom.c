/* SPDX-License-Identifier: MIT */
/*
 * cutmixgeom: CutMix's area choice and box rule (daemon/pixels/detect.c,
 * detect_cutmix_geometry) on given boxes with given draws, for
 * tests/ultralytics/test_cutmix.py against Ultralytics' CutMix.
 *
 *   stdin:  SIZE CHOICE
 *           LAM0 LAM1 LAM2
 *           CX0 CX1 CX2
 *           CY0 CY1 CY2
 *           N, then N rows "cls x1 y1 x2 y2" (the image's boxes, pixels)
 *           M, then M rows (the partner's)
 *   stdout: "skip", or "area X1 Y1 X2 Y2" and the kept partner rows, %.9g.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int detect_cutmix_geometry(uint32_t size, const double lam[3], const int64_t cx[3], const int64_t cy[3], double choice,
			   const float *boxes, size_t n, float *partner, size_t *n_partner, float area[4]);

static float *read_rows(size_t *n)
{
	float *v;

	if (scanf("%zu", n) != 1 || *n > 100000)
		return NULL;
	v = calloc(*n * 5 + 1, sizeof(float));
	for (size_t i = 0; v && i < *n * 5; i++)
		if (scanf("%f", &v[i]) != 1) {
			free(v);
			return NULL;
		}
	return v;
}

int main(void)
{
	double lam[3], choice;
	long long cx[3], cy[3];
	int64_t x[3], y[3];
	unsigned size;
	size_t n, m;
	float *a, *b, area[4];
	int r;

	if (scanf("%u %lf %lf %lf %lf %lld %lld %lld %lld %lld %lld", &size, &choice, &lam[0], &lam[1], &lam[2], &cx[0],
		  &cx[1], &cx[2], &cy[0], &cy[1], &cy[2]) != 11)
		return 1;
	for (int k = 0; k < 3; k++) {
		x[k] = cx[k];
		y[k] = cy[k];
	}
	a = read_rows(&n);
	b = read_rows(&m);
	if (!a || !b)
		return 1;
	r = detect_cutmix_geometry(size, lam, x, y, choice, a, n, b, &m, area);
	if (r < 0)
		return 1;
	if (r == 0)
		printf("skip\n");
	else {
		printf("area %.9g %.9g %.9g %.9g\n", (double)area[0], (double)area[1], (double)area[2],
		       (double)area[3]);
		for (size_t i = 0; i < m; i++)
			printf("%.9g %.9g %.9g %.9g %.9g\n", (double)b[i * 5], (double)b[i * 5 + 1],
			       (double)b[i * 5 + 2], (double)b[i * 5 + 3], (double)b[i * 5 + 4]);
	}
	free(a);
	free(b);
	return 0;
}
