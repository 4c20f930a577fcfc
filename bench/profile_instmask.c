/* SPDX-License-Identifier: MIT */
/*
 * instmask_overlap (daemon/pixels/instmask.c, Format's overlap mask) against
 * a base revision's, interleaved in one process on the same polygons:
 *
 *     make bench-instmask [INSTMASK_BASE=rev] [INSTMASK_ARGS="..."]
 *     profile_instmask [--epochs N] [--size 640] [--ratio 4] LABEL_DIR
 *
 * The polygons are the segment labels in LABEL_DIR (Ultralytics' text
 * format, e.g. bench/out/yolo/instances-256/segment/labels/train, made by
 * bench/mkinstances.py), placed as the training path places them with
 * Ultralytics' defaults: four label files a scene, each of its polygons
 * resampled to 1000 points (instmask_resample, as update_labels_info),
 * scaled to a `size` image in one quadrant of mosaic's 2 size canvas around
 * a random centre, RandomPerspective's scale (0.5 .. 1.5) and translate
 * (0.1) into the size x size output, clipped to it (Instances.clip). Each
 * scene is made by the base's and this tree's instmask_overlap in turn (the
 * order alternating), each timed on the thread's CPU clock
 * (CLOCK_THREAD_CPUTIME_ID), and their masks and area orders compared
 * byte for byte: a difference fails the run (exit 1). The resample of
 * each polygon (update_labels_info's, which the daemon runs on every
 * tile's polygons) and their RandomPerspective transform
 * (instgeom_transform) are timed and compared the same way.
 *
 * Prints milliseconds per image of each and their ratio, then one JSON line.
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "instgeom.h"
#include "instmask.h"
#include "rng.h"

/* The base revision's functions (its instmask.c compiled with base_ names,
 * Makefile's bench-instmask). */
struct base_instmask;
int base_instmask_new(struct base_instmask **out);
void base_instmask_free(struct base_instmask *m);
void base_instgeom_transform(const float M[9], bool divide, float *xy, size_t npts, size_t stride);
void base_instmask_resample(const float *xy, uint32_t n, uint32_t m, float *out);
int base_instmask_overlap(struct base_instmask *m, const float *xy, const uint32_t *off, uint32_t count, uint32_t w,
			  uint32_t h, uint32_t ratio, uint16_t *mask, uint32_t *order);

#define MAX_FILES 4096
#define MAX_POLYS 256 /* a scene's */
#define MAX_LABEL_POINTS 4096

struct label {
	uint32_t n; /* polygons */
	uint32_t *np;
	float *xy; /* normalised */
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * The expressions NEW and BASE timed on the thread's CPU clock, NEW first
 * when new_first (alternated, so that neither always runs on caches the
 * other warmed), each one's time added to t_new and t_base.
 */
#define TIMED_PAIR(new_first, NEW, BASE, t_new, t_base)  \
	do {                                             \
		bool nf_ = (new_first);                  \
		double t0_ = now(), t1_, t2_;            \
                                                         \
		if (nf_)                                 \
			(void)(NEW);                     \
		else                                     \
			(void)(BASE);                    \
		t1_ = now();                             \
		if (nf_)                                 \
			(void)(BASE);                    \
		else                                     \
			(void)(NEW);                     \
		t2_ = now();                             \
		(t_new) += nf_ ? t1_ - t0_ : t2_ - t1_;  \
		(t_base) += nf_ ? t2_ - t1_ : t1_ - t0_; \
	} while (0)

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void read_label(const char *path, struct label *l)
{
	FILE *f = fopen(path, "r");
	char line[65536];
	size_t total = 0;

	*l = (struct label){0};
	if (!f)
		return;
	l->np = calloc(MAX_POLYS, sizeof(*l->np));
	l->xy = malloc((size_t)MAX_POLYS * MAX_LABEL_POINTS * 2 * sizeof(float));
	while (l->n < MAX_POLYS && fgets(line, sizeof(line), f)) {
		char *p = line, *e;
		uint32_t k = 0;

		strtol(p, &e, 10); /* the class */
		if (e == p)
			continue;
		p = e;
		for (;;) {
			float v = strtof(p, &e);

			if (e == p || k >= MAX_LABEL_POINTS * 2)
				break;
			l->xy[(total + k / 2) * 2 + k % 2] = v;
			k++;
			p = e;
		}
		if (k >= 6) {
			l->np[l->n++] = k / 2;
			total += k / 2;
		}
	}
	fclose(f);
}

int main(int argc, char **argv)
{
	unsigned epochs = 20, size = 640, ratio = 4, nfiles = 0, scenes;
	const char *dir = NULL;
	char *names[MAX_FILES];
	struct label *labels;
	struct base_instmask *bm;
	struct instmask *m;
	struct rng rng;
	double t_base = 0, t_new = 0, r_base = 0, r_new = 0, x_base = 0, x_new = 0;
	uint64_t images = 0, polys = 0;
	DIR *d;
	struct dirent *de;
	float *xy, *tmp, *res_b, *tr_b;
	uint32_t off[MAX_POLYS * 4 + 1], order_b[MAX_POLYS * 4], order_n[MAX_POLYS * 4];
	uint16_t *mask_b, *mask_n;
	size_t cells;

	for (int a = 1; a < argc; a++) {
		if (!strcmp(argv[a], "--epochs") && a + 1 < argc)
			epochs = (unsigned)atoi(argv[++a]);
		else if (!strcmp(argv[a], "--size") && a + 1 < argc)
			size = (unsigned)atoi(argv[++a]);
		else if (!strcmp(argv[a], "--ratio") && a + 1 < argc)
			ratio = (unsigned)atoi(argv[++a]);
		else
			dir = argv[a];
	}
	if (!dir || !(d = opendir(dir))) {
		fprintf(stderr, "usage: profile_instmask [--epochs N] [--size 640] [--ratio 4] LABEL_DIR\n");
		return 2;
	}
	while ((de = readdir(d)) && nfiles < MAX_FILES)
		if (strstr(de->d_name, ".txt")) {
			size_t len = strlen(dir) + strlen(de->d_name) + 2;

			names[nfiles] = malloc(len);
			snprintf(names[nfiles++], len, "%s/%s", dir, de->d_name);
		}
	closedir(d);
	qsort(names, nfiles, sizeof(*names), cmp_str);
	labels = calloc(nfiles ? nfiles : 1, sizeof(*labels));
	for (unsigned i = 0; i < nfiles; i++)
		read_label(names[i], &labels[i]);
	scenes = nfiles / 4;
	if (!scenes || size % ratio || base_instmask_new(&bm) < 0 || instmask_new(&m) < 0)
		return 2;
	cells = (size_t)(size / ratio) * (size / ratio);
	xy = malloc((size_t)MAX_POLYS * 4 * INSTMASK_SEGMENT_POINTS * 2 * sizeof(float));
	tmp = malloc((size_t)MAX_LABEL_POINTS * 2 * sizeof(float));
	res_b = malloc((size_t)INSTMASK_SEGMENT_POINTS * 2 * sizeof(float));
	tr_b = malloc((size_t)INSTMASK_SEGMENT_POINTS * 2 * sizeof(float));
	mask_b = malloc(cells * 2);
	mask_n = malloc(cells * 2);
	rng_init(&rng, 0, 0, 0, RNG_AUGMENT);
	for (unsigned e = 0; e < epochs; e++)
		for (unsigned s = 0; s < scenes; s++) {
			float xc = (float)(size / 2) + (float)rng_uniform(&rng) * (float)size;
			float yc = (float)(size / 2) + (float)rng_uniform(&rng) * (float)size;
			float sc = 0.5f + (float)rng_uniform(&rng),
			      tx = (0.4f + 0.2f * (float)rng_uniform(&rng)) * (float)size;
			float ty = (0.4f + 0.2f * (float)rng_uniform(&rng)) * (float)size;
			const float M[9] = {sc, 0, tx - (float)size * sc, 0, sc, ty - (float)size * sc, 0, 0, 1};
			uint32_t count = 0, pts = 0;
			int rb, rn;

			for (unsigned q = 0; q < 4; q++) {
				const struct label *l = &labels[s * 4 + q];
				float ox = q % 2 ? xc : xc - (float)size, oy = q / 2 ? yc : yc - (float)size;
				size_t at = 0;

				for (uint32_t k = 0; k < l->n; k++) {
					uint32_t np = l->np[k],
						 mm = instmask_resample_count(np, INSTMASK_SEGMENT_POINTS);
					float *o = xy + (size_t)pts * 2;

					if (mm != INSTMASK_SEGMENT_POINTS) {
						at += np;
						continue;
					}
					memcpy(tmp, l->xy + at * 2, (size_t)np * 2 * sizeof(float));
					at += np;
					TIMED_PAIR((e + s) % 2, (instmask_resample(tmp, np, mm, o)),
						   (base_instmask_resample(tmp, np, mm, res_b)), r_new, r_base);
					if (memcmp(o, res_b, (size_t)mm * 2 * sizeof(float))) {
						fprintf(stderr,
							"profile_instmask: epoch %u scene %u: resample differs\n", e,
							s);
						return 1;
					}
					for (uint32_t j = 0; j < mm; j++) { /* on mosaic's canvas */
						o[2 * j] = o[2 * j] * (float)size + ox;
						o[2 * j + 1] = o[2 * j + 1] * (float)size + oy;
					}
					memcpy(tr_b, o, (size_t)mm * 2 * sizeof(float));
					TIMED_PAIR((e + s) % 2, (instgeom_transform(M, true, o, mm, 2)),
						   (base_instgeom_transform(M, true, tr_b, mm, 2)), x_new, x_base);
					if (memcmp(o, tr_b, (size_t)mm * 2 * sizeof(float))) {
						fprintf(stderr,
							"profile_instmask: epoch %u scene %u: transform differs\n", e,
							s);
						return 1;
					}
					for (uint32_t j = 0; j < mm * 2; j++) /* Instances.clip */
						o[j] = o[j] < 0 ? 0 : o[j] > (float)size ? (float)size : o[j];
					off[count++] = pts;
					pts += mm;
				}
			}
			off[count] = pts;
			TIMED_PAIR((e + s) % 2,
				   (rn = instmask_overlap(m, xy, off, count, size, size, ratio, mask_n, order_n)),
				   (rb = base_instmask_overlap(bm, xy, off, count, size, size, ratio, mask_b, order_b)),
				   t_new, t_base);
			if (rb != rn || (rb == 0 && (memcmp(mask_b, mask_n, cells * 2) ||
						     memcmp(order_b, order_n, count * sizeof(*order_b))))) {
				fprintf(stderr, "profile_instmask: epoch %u scene %u differs from the base\n", e, s);
				return 1;
			}
			images++;
			polys += count;
		}
	printf("instmask_overlap, %llu images (%.1f polygons each), %ux%u, mask_ratio %u: masks and orders equal\n",
	       (unsigned long long)images, (double)polys / (double)images, size, size, ratio);
	printf("  base  %.4f ms/image\n  now   %.4f ms/image\n  base / now %.2f\n", t_base * 1e3 / (double)images,
	       t_new * 1e3 / (double)images, t_base / t_new);
	printf("instmask_resample of the same polygons to %u points: outputs equal\n", INSTMASK_SEGMENT_POINTS);
	printf("  base  %.4f ms/image\n  now   %.4f ms/image\n  base / now %.2f\n", r_base * 1e3 / (double)images,
	       r_new * 1e3 / (double)images, r_base / r_new);
	printf("instgeom_transform (RandomPerspective's, fused, divided) of the same points: outputs equal\n");
	printf("  base  %.4f ms/image\n  now   %.4f ms/image\n  base / now %.2f\n", x_base * 1e3 / (double)images,
	       x_new * 1e3 / (double)images, x_base / x_new);
	printf("{\"images\": %llu, \"base_ms\": %.5f, \"now_ms\": %.5f, \"ratio\": %.3f, \"resample_base_ms\": %.5f, "
	       "\"resample_now_ms\": %.5f, \"transform_base_ms\": %.5f, \"transform_now_ms\": %.5f}\n",
	       (unsigned long long)images, t_base * 1e3 / (double)images, t_new * 1e3 / (double)images, t_base / t_new,
	       r_base * 1e3 / (double)images, r_new * 1e3 / (double)images, x_base * 1e3 / (double)images,
	       x_new * 1e3 / (double)images);
	for (unsigned i = 0; i < nfiles; i++) {
		free(names[i]);
		free(labels[i].np);
		free(labels[i].xy);
	}
	free(labels);
	free(xy);
	free(tmp);
	free(res_b);
	free(tr_b);
	free(mask_b);
	free(mask_n);
	instmask_free(m);
	base_instmask_free(bm);
	return 0;
}
