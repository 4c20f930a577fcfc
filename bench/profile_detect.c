/* SPDX-License-Identifier: MIT */
/*
 * Per-stage cost of a YOLO detection sample without the daemon: one thread,
 * the daemon's own code (build/libstokerd.a), over the files given.
 *
 *     profile_detect [--epochs N] [--size 640] [--isa scalar,avx2,avx512] FILE... | -
 *
 * A sample is what a stokerd worker does for it: pipeline_fit() (decode at
 * full size, EXIF turn, cv2-exact INTER_LINEAR resize to long side `size`,
 * as Ultralytics' load_image) and then detect_make(), letterbox-`size`
 * (LetterBox, the validation transform) or mosaic-`size` (DETECT_TRAIN with
 * Ultralytics' default hyper-parameters). The daemon makes each batch
 * position's fit once and shares it with the mosaics that use it as a
 * partner, so a mosaic sample costs one fit plus its transform, as here.
 *
 * The fit's stages are timed apart on the same files: the EXIF turn
 * (image_orient) and the resize (cv_resize_linear) on a decoded copy; what
 * remains of the fit is the decode (header walk and libjpeg-turbo / libpng).
 * detect_make()'s stages come from detect_profile(). Flips are folded into
 * the warp and the copy, and detect_make() writes straight into the
 * caller's buffer (the daemon's slot): neither has a pass of its own.
 * The letterbox is made as the daemon makes it: the fit straight into the
 * output at LetterBox's offset (fit_request.in_box), 114 around it, and
 * detect_make() on that placed sample (boxes only); its "copy + pad" row is
 * what the in-box fit costs over the plain one. Each epoch runs every fit
 * variant and the decode limit once in turn, so that a shared machine's
 * load falls on all of them alike; every clock is the thread's CPU time
 * (CLOCK_THREAD_CPUTIME_ID), not the wall's.
 * `--isa` runs the whole profile once per kernel set (resize_force_isa,
 * which detect.c's warp and HSV kernels follow too).
 *
 * Prints a table of milliseconds per sample and shares, then one JSON line.
 */
#include <stdint.h>

#include "augment.h"
#include "bench_files.h"
#include "detect.h"
#include "header.h"
#include "resize.h"
#include "resize_cv.h"
#include "rng.h"

/* The rows of the table: the fit's stages, then detect_make()'s. */
enum row {
	ROW_DECODE,
	ROW_TURN,
	ROW_RESIZE,
	ROW_LOAD_CALL,
	ROW_CANVAS,
	ROW_WARP,
	ROW_COPY,
	ROW_MIXUP,
	ROW_HSV,
	ROW_BOXES,
	ROW_OTHER,
	ROWS
};
static const char *const row_names[ROWS] = {
	"decode (header, libjpeg/png)",
	"EXIF turn",
	"resize (cv2 INTER_LINEAR)",
	"loader call",
	"mosaic canvas + 114",
	"warp (RandomPerspective)",
	"letterbox pad 114 (in-box fit)",
	"mixup",
	"HSV",
	"boxes and labels",
	"other",
};
static const char *const row_keys[ROWS] = {"decode",   "exif_turn", "resize", "loader_call", "canvas", "warp",
					   "copy_pad", "mixup",     "hsv",    "boxes",       "other"};

struct fitted {
	uint8_t *pixels;
	struct fit_result res;
};

struct loader {
	const struct fitted *fits;
	size_t n;
	uint8_t *placed; /* letterbox: the output, already holding the in-box fit (as the daemon's slot); else NULL */
};

static int load(void *ctx, uint64_t index, uint32_t side, struct detect_sample *out)
{
	const struct loader *l = ctx;
	const struct fitted *f = &l->fits[index % l->n];

	(void)side;
	*out = (struct detect_sample){.pixels = l->placed ? l->placed : f->pixels,
				      .width = f->res.width,
				      .height = f->res.height,
				      .orig_width = f->res.full_width,
				      .orig_height = f->res.full_height,
				      .placed = l->placed != NULL,
				      /* fits[] outlive the sample, as the daemon's fit table does */
				      .stable = true};
	return 0;
}

/*
 * The profile's clock: this thread's CPU time, as detect_profile()'s stage
 * clocks, so that what other processes take from a shared machine is not
 * counted (they still share its caches and memory bandwidth).
 */
static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
	fprintf(stderr, "profile_detect: %s\n", what);
	exit(1);
}

/*
 * Seconds of the fit's parts over all files, each epoch running every
 * variant once in turn (so that a shared machine's load falls on all of
 * them alike): [0] whole fits (cv2), [1] turns, [2] resizes, [3] whole fits
 * with resample="antialias" (DCT-reduced decode where it can, resize.c's
 * filter), [4] the letterbox as the daemon makes it (fit_request.in_box:
 * the cv2 fit straight into the size x size output, 114 around it), [5] the
 * same with "antialias", [6] the decode limit (tjDecompress2 to RGB, as
 * jpeg_limit; 0 for a list with other formats).
 */
#define FIT_TIMES 7
static void time_fits(const struct bench_file *files, size_t n, int epochs, uint32_t size, struct fitted *fits,
		      double t[FIT_TIMES])
{
	struct decode_limits lim = {.max_pixels = 0, .max_scans = 0};
	struct pipeline *p;
	struct cv_resizer *cv;
	tjhandle tj = tjInitDecompress();
	uint8_t *rgbx = NULL, *turned = NULL;
	unsigned char *rgb = NULL;
	size_t cap = 0, tcap = 0, rgb_cap = 0;
	/*
	 * pass k: its request and where its time goes. Every pass writes each
	 * file's own buffer, as the daemon writes each batch position's slot or
	 * fit entry (not one buffer kept in cache); the plain cv2 fit last, so
	 * that fits[] ends with its pixels.
	 */
	const struct {
		struct fit_request req;
		int slot;
	} pass[4] = {{{size, 0, 0, FIT_ANTIALIAS, false}, 3},
		     {{size, size, size, FIT_ANTIALIAS, true}, 5},
		     {{size, size, size, FIT_CV2, true}, 4},
		     {{size, 0, 0, FIT_CV2, false}, 0}};

	if (pipeline_new(&lim, &p) < 0 || cv_resizer_new(&cv) < 0 || !tj)
		die("setup failed");
	for (int k = 0; k < FIT_TIMES; k++)
		t[k] = 0;
	/* one untimed pass of each (caches, buffers) */
	for (int k = 0; k < 4; k++)
		for (size_t i = 0; i < n; i++) {
			struct fit_result res;

			if (pipeline_fit(p, files[i].data, files[i].len, &pass[k].req, fits[i].pixels,
					 pass[k].req.in_box ? &res : &fits[i].res) < 0)
				die(pipeline_error(p));
		}
	for (int e = 0; e < epochs; e++) {
		double t0;

		for (int k = 0; k < 4; k++) {
			t0 = cpu_now();
			for (size_t i = 0; i < n; i++) {
				struct fit_result res;

				if (pipeline_fit(p, files[i].data, files[i].len, &pass[k].req, fits[i].pixels,
						 pass[k].req.in_box ? &res : &fits[i].res) < 0)
					die(pipeline_error(p));
			}
			t[pass[k].slot] += cpu_now() - t0;
		}
		t0 = cpu_now();
		if (t[6] >= 0 && bench_decode_all(tj, files, n, &rgb, &rgb_cap, "profile_detect") < 0)
			t[6] = -1; /* not all JPEGs: no limit */
		else if (t[6] >= 0)
			t[6] += cpu_now() - t0;
	}
	if (t[6] < 0)
		t[6] = 0;
	/* the turn and the resize alone, on a decoded copy (a JPEG's; others count in decode) */
	for (size_t i = 0; i < n; i++) {
		int w, h, ss, cs;
		struct image_header hd = {0};
		struct decoded_region reg, up;

		if (tjDecompressHeader3(tj, files[i].data, files[i].len, &w, &h, &ss, &cs) < 0)
			continue;
		if ((size_t)w * h * 4 > cap) {
			cap = (size_t)w * h * 4;
			rgbx = realloc(rgbx, cap);
			if (!rgbx)
				die("out of memory");
		}
		if (tjDecompress2(tj, files[i].data, files[i].len, rgbx, w, w * 4, h, TJPF_RGBX, 0) < 0)
			continue;
		image_header_mem(files[i].data, files[i].len, &hd);
		reg = (struct decoded_region){rgbx, (size_t)w * 4, (uint32_t)w, (uint32_t)h};
		for (int e = 0; e < epochs; e++) {
			double t0 = cpu_now(), t1;

			if (image_orient(&reg, hd.orientation, &turned, &tcap, &up) < 0)
				die("out of memory");
			t1 = cpu_now();
			if (cv_resize_linear(cv, up.pixels, up.width, up.height, up.stride, 4, fits[i].pixels,
					     fits[i].res.width, fits[i].res.height, (size_t)fits[i].res.width * 3) < 0)
				die("resize failed");
			t[1] += t1 - t0;
			t[2] += cpu_now() - t1;
		}
	}
	free(rgbx);
	free(rgb);
	free(turned);
	tjDestroy(tj);
	cv_resizer_free(cv);
	pipeline_free(p);
}

/* Seconds of detect_make() over all files as `t`, its stages into ns. */
static double time_transform(enum detect_transform t, const struct fitted *fits, size_t n, int epochs, uint32_t size,
			     uint64_t ns[DETECT_STAGES])
{
	uint8_t *out = malloc((size_t)size * size * 3);
	struct loader l = {fits, n, t == DETECT_LETTERBOX ? out : NULL};
	struct detect_params prm;
	struct detect *d;
	float boxes[64 * DETECT_BOX_FLOATS];
	double t0;

	if (!out || detect_new(&d) < 0)
		die("setup failed");
	detect_params_default(&prm);
	detect_profile(d, ns);
	t0 = cpu_now();
	for (int e = 0; e < epochs; e++)
		for (size_t i = 0; i < n; i++) {
			uint32_t count = 0;
			uint64_t dropped = 0;
			struct rng rng;

			rng_init(&rng, 0, (uint64_t)e, i, RNG_AUGMENT);
			if (detect_run(d, t, &prm, size, i, n, &rng, load, &l, out, boxes, 64, &count, &dropped) < 0)
				die("detect_run failed");
		}
	t0 = cpu_now() - t0;
	detect_free(d);
	free(out);
	return t0;
}

static void profile(const struct bench_file *files, size_t n, int epochs, uint32_t size, const char *isa, bool first)
{
	struct fitted *fits = calloc(n, sizeof(*fits));
	double images = (double)n * epochs, fit[FIT_TIMES], ms[2][ROWS] = {{0}}, total[2], aa[2], limit;
	uint64_t ns[2][DETECT_STAGES] = {{0}};
	static const int stage_row[DETECT_STAGES] = {ROW_LOAD_CALL, ROW_CANVAS, ROW_WARP, ROW_COPY,
						     ROW_MIXUP,     ROW_HSV,    ROW_BOXES};

	if (!fits)
		die("out of memory");
	for (size_t i = 0; i < n; i++)
		if (!(fits[i].pixels = malloc((size_t)size * size * 3)))
			die("out of memory");
	time_fits(files, n, epochs, size, fits, fit);
	limit = fit[6] / images * 1e3;
	for (int k = 0; k < 2; k++) {
		double staged = 0,
		       dm = time_transform(k ? DETECT_TRAIN : DETECT_LETTERBOX, fits, n, epochs, size, ns[k]);

		ms[k][ROW_TURN] = fit[1] / images * 1e3;
		ms[k][ROW_RESIZE] = fit[2] / images * 1e3;
		ms[k][ROW_DECODE] = (fit[0] - fit[1] - fit[2]) / images * 1e3;
		for (int s = 0; s < DETECT_STAGES; s++) {
			ms[k][stage_row[s]] += (double)ns[k][s] * 1e-6 / images;
			staged += (double)ns[k][s] * 1e-9;
		}
		ms[k][ROW_OTHER] = (dm - staged) / images * 1e3;
		if (k == 0) {
			/* the daemon's letterbox: the in-box fit, whose extra over the plain fit is the 114 border */
			double pad = (fit[4] - fit[0]) / images * 1e3;

			ms[0][pad > 0 ? ROW_COPY : ROW_OTHER] += pad;
			total[0] = (fit[4] + dm) / images * 1e3;
			aa[0] = (fit[5] + dm) / images * 1e3;
		} else {
			total[1] = (fit[0] + dm) / images * 1e3;
			aa[1] = (fit[3] + dm) / images * 1e3;
		}
	}
	printf("\nresize kernels: %s; %zu files x %d epochs, %ux%u, one thread\n", isa, n, epochs, size, size);
	printf("%-30s %14s %6s %14s %6s\n", "stage", "letterbox ms", "share", "mosaic ms", "share");
	for (int r = 0; r < ROWS; r++)
		printf("%-30s %14.3f %5.1f%% %14.3f %5.1f%%\n", row_names[r], ms[0][r], 100 * ms[0][r] / total[0],
		       ms[1][r], 100 * ms[1][r] / total[1]);
	printf("%-30s %14.3f %6s %14.3f\n", "total per sample", total[0], "", total[1]);
	printf("%-30s %14.0f %6s %14.0f\n", "samples/s (one thread)", 1e3 / total[0], "", 1e3 / total[1]);
	printf("%-30s %14.3f %6s %14.3f\n", "resample=antialias: total", aa[0], "", aa[1]);
	printf("%-30s %13.2fx %6s %13.2fx\n", "cv2 / antialias speed", aa[0] / total[0], "", aa[1] / total[1]);
	if (limit > 0)
		printf("%-30s %14.3f %6s %14s\n%-30s %14.2f %6s %14.2f\n", "decode limit (tjDecompress2 RGB)", limit,
		       "", "", "of the decode limit", limit / total[0], "", limit / total[1]);
	fprintf(stderr, "%s{\"isa\": \"%s\", \"files\": %zu, \"epochs\": %d, \"size\": %u, \"decode_limit_ms\": %.4f",
		first ? "" : "\n", isa, n, epochs, size, limit);
	for (int k = 0; k < 2; k++) {
		fprintf(stderr, ", \"%s\": {\"total_ms\": %.4f, \"antialias_total_ms\": %.4f",
			k ? "mosaic" : "letterbox", total[k], aa[k]);
		for (int r = 0; r < ROWS; r++)
			fprintf(stderr, ", \"%s_ms\": %.4f", row_keys[r], ms[k][r]);
		fprintf(stderr, "}");
	}
	fprintf(stderr, "}");
	for (size_t i = 0; i < n; i++)
		free(fits[i].pixels);
	free(fits);
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		enum resize_isa isa;
	} isas[] = {{"scalar", RESIZE_ISA_SCALAR}, {"avx2", RESIZE_ISA_AVX2}, {"avx512", RESIZE_ISA_AVX512}};
	int epochs = 1, a = 1;
	uint32_t size = 640;
	const char *which = "scalar,avx2";
	struct bench_file *files = NULL;
	size_t n = 0;
	bool first = true;

	for (; a < argc && !strncmp(argv[a], "--", 2); a++) {
		if (!strcmp(argv[a], "--epochs") && a + 1 < argc)
			epochs = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--size") && a + 1 < argc)
			size = (uint32_t)atoi(argv[++a]);
		else if (!strcmp(argv[a], "--isa") && a + 1 < argc)
			which = argv[++a];
		else
			goto usage;
	}
	if (bench_load_files(argc, argv, a, "profile_detect", &files, &n) < 0)
		return 1;
	if (n == 0 || epochs < 1 || size < 32 || size > 4096)
		goto usage;
	for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++) {
		if (!strstr(which, isas[i].name))
			continue;
		if (resize_force_isa(isas[i].isa) < 0) {
			printf("\nresize kernels: %s: not on this CPU\n", isas[i].name);
			continue;
		}
		profile(files, n, epochs, size, isas[i].name, first);
		first = false;
	}
	fprintf(stderr, "\n");
	resize_force_isa(RESIZE_ISA_AUTO);
	bench_free_files(files, n);
	return 0;
usage:
	fprintf(stderr, "usage: profile_detect [--epochs N] [--size 640] [--isa scalar,avx2,avx512] FILE... | -\n");
	return 2;
}
