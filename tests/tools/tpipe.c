/* SPDX-License-Identifier: MIT */
/*
 * tpipe: the transform pipeline (daemon/pixels/pipeline.h) outside the
 * daemon, for the tests (tests/transforms/) to compare with torchvision
 * and timm. The pipeline is given in its text form (proto/transform_text.h)
 * and goes through the daemon's own attach-time validation.
 *
 *   tpipe check TEXT
 *       "ok OUT_W OUT_H DESCRIPTION" or "! reason" (exit 1)
 *   tpipe run TEXT SEED FILE...
 *       for each FILE, the pipeline on it with the stream (SEED, 0, i) of
 *       its position i: its draws, one a line, "draw OP KIND V0 V1 V2 V3",
 *       then "out DTYPE W H BYTES" and the output's bytes (or "! reason")
 *   tpipe draw TEXT OP WIDTH HEIGHT SEED N
 *       N draws of op OP alone on a WIDTH x HEIGHT image (streams (SEED,
 *       0, i)), as N * 4 float64 on stdout (top, left, h, w; flips 1/0;
 *       no erasing -1)
 *   tpipe time TEXT EPOCHS FILE...
 *       EPOCHS passes of the pipeline over the files, untraced (a profile
 *       target: perf record build/tests/tpipe time ...); prints "ms/image X"
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "augment.h"
#include "pipeline.h"
#include "transform_text.h"
#include "transforms.h"

static int parse(const char *text, struct tpipe **t)
{
	Stoker__TransformOp **ops = NULL;
	size_t n = 0;
	char err[512];
	int r;

	r = transform_text_parse(text, &ops, &n, err, sizeof(err));
	if (r >= 0)
		r = transforms_from_proto(ops, n, t, err, sizeof(err));
	transform_text_free(ops, n);
	if (r < 0)
		printf("! %s\n", err);
	return r;
}

static uint8_t *slurp(const char *path, size_t *len)
{
	uint8_t *data = NULL;
	long n;
	FILE *f = fopen(path, "rbe");

	if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (data = malloc((size_t)n + 1)) && fread(data, 1, (size_t)n, f) == (size_t)n)
		*len = (size_t)n;
	else {
		free(data);
		data = NULL;
	}
	if (f)
		fclose(f);
	return data;
}

static int run(struct tpipe *t, uint64_t seed, int nfiles, char **files)
{
	static const char *const dtypes[] = {"uint8", "float32", "float16"};
	struct transform_spec spec = {.dtype = DTYPE_UINT8, .mean = {0, 0, 0}, .std = {1, 1, 1}};
	struct tpipe_info info;
	struct pipeline *p = NULL;
	struct tpipe_ctx *c = NULL;
	uint8_t *out = NULL;
	size_t bytes;
	int r;

	tpipe_info(t, &info);
	if (info.has_dtype) {
		spec.dtype = info.dtype;
		memcpy(spec.mean, info.mean, sizeof(spec.mean));
		memcpy(spec.std, info.std, sizeof(spec.std));
	}
	bytes = (size_t)info.out_w * info.out_h * 3 * sample_dtype_bytes(spec.dtype);
	out = malloc(bytes);
	r = out ? pipeline_new(NULL, &p) : -ENOMEM;
	if (r >= 0)
		r = tpipe_ctx_new(&c);
	if (r < 0)
		goto done;
	tpipe_trace_enable(c, true);
	for (int i = 0; i < nfiles; i++) {
		const struct tpipe_draw *d;
		struct rng rng;
		size_t len = 0, n;
		uint8_t *data = slurp(files[i], &len);

		if (!data) {
			printf("! %s: cannot read\n", files[i]);
			continue;
		}
		rng_init(&rng, seed, 0, (uint64_t)i, RNG_AUGMENT);
		r = tpipe_run(c, p, t, data, len, NULL, &spec, &rng, out);
		free(data);
		n = tpipe_trace(c, &d);
		for (size_t k = 0; k < n; k++)
			printf("draw %u %s %.17g %.17g %.17g %.17g\n", d[k].op, d[k].kind, d[k].v[0], d[k].v[1],
			       d[k].v[2], d[k].v[3]);
		if (r < 0) {
			printf("! %s\n", tpipe_ctx_error(c));
			continue;
		}
		printf("out %s %u %u %zu\n", dtypes[spec.dtype], info.out_w, info.out_h, bytes);
		fflush(stdout);
		fwrite(out, 1, bytes, stdout);
		fflush(stdout);
	}
	r = 0;
done:
	tpipe_ctx_free(c);
	pipeline_free(p);
	free(out);
	return r;
}

/* EPOCHS passes of the pipeline over the files (read once), the time per image on stdout. */
static int timed(struct tpipe *t, int epochs, int nfiles, char **files)
{
	struct transform_spec spec = {.dtype = DTYPE_UINT8, .mean = {0, 0, 0}, .std = {1, 1, 1}};
	struct tpipe_info info;
	struct pipeline *p = NULL;
	struct tpipe_ctx *c = NULL;
	uint8_t *out = NULL, **data = calloc((size_t)nfiles + 1, sizeof(*data));
	size_t *len = calloc((size_t)nfiles + 1, sizeof(*len));
	struct timespec t0, t1;
	int r = data && len ? 0 : -ENOMEM;

	tpipe_info(t, &info);
	if (info.has_dtype) {
		spec.dtype = info.dtype;
		memcpy(spec.mean, info.mean, sizeof(spec.mean));
		memcpy(spec.std, info.std, sizeof(spec.std));
	}
	for (int i = 0; r == 0 && i < nfiles; i++)
		if (!(data[i] = slurp(files[i], &len[i]))) {
			printf("! %s: cannot read\n", files[i]);
			r = -EIO;
		}
	if (r == 0)
		r = (out = malloc((size_t)info.out_w * info.out_h * 3 * sample_dtype_bytes(spec.dtype))) ? 0 : -ENOMEM;
	if (r == 0)
		r = pipeline_new(NULL, &p);
	if (r == 0)
		r = tpipe_ctx_new(&c);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int e = 0; r == 0 && e < epochs; e++)
		for (int i = 0; r == 0 && i < nfiles; i++) {
			struct rng rng;

			rng_init(&rng, 0, (uint64_t)e, (uint64_t)i, RNG_AUGMENT);
			r = tpipe_run(c, p, t, data[i], len[i], NULL, &spec, &rng, out);
			if (r < 0)
				printf("! %s: %s\n", files[i], tpipe_ctx_error(c));
		}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (r == 0 && nfiles && epochs > 0)
		printf("ms/image %.4f\n",
		       ((double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6) /
			       ((double)nfiles * epochs));
	for (int i = 0; data && i < nfiles; i++)
		free(data[i]);
	free(data);
	free(len);
	tpipe_ctx_free(c);
	pipeline_free(p);
	free(out);
	return r;
}

int main(int argc, char **argv)
{
	struct tpipe *t = NULL;
	struct tpipe_info info;
	char desc[4096];
	int r = 2;

	if (argc < 3 || (strcmp(argv[1], "check") && strcmp(argv[1], "run") && strcmp(argv[1], "draw") &&
			 strcmp(argv[1], "time"))) {
		fprintf(stderr,
			"usage: tpipe check TEXT | run TEXT SEED FILE... | draw TEXT OP W H SEED N | time TEXT EPOCHS "
			"FILE...\n");
		return 2;
	}
	if (parse(argv[2], &t) < 0)
		return 1;
	if (!strcmp(argv[1], "check")) {
		tpipe_info(t, &info);
		tpipe_describe(t, desc, sizeof(desc));
		printf("ok %u %u %s\n", info.out_w, info.out_h, desc);
		r = 0;
	} else if (!strcmp(argv[1], "run") && argc >= 4) {
		r = run(t, strtoull(argv[3], NULL, 0), argc - 4, argv + 4) < 0 ? 1 : 0;
	} else if (!strcmp(argv[1], "time") && argc >= 4) {
		r = timed(t, atoi(argv[3]), argc - 4, argv + 4) < 0 ? 1 : 0;
	} else if (!strcmp(argv[1], "draw") && argc == 8) {
		size_t n = strtoull(argv[7], NULL, 0);
		double *v = calloc(n ? 4 * n : 1, sizeof(*v));

		r = v ? tpipe_draw_params(t, strtoull(argv[3], NULL, 0), (uint32_t)strtoul(argv[4], NULL, 0),
					  (uint32_t)strtoul(argv[5], NULL, 0), strtoull(argv[6], NULL, 0), n, v)
		      : -ENOMEM;
		if (r == 0)
			fwrite(v, sizeof(*v), 4 * n, stdout);
		else
			fprintf(stderr, "draw: %s\n", strerror(-r));
		r = r == 0 ? 0 : 1;
		free(v);
	}
	tpipe_free(t);
	return r;
}
