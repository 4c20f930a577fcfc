/* SPDX-License-Identifier: MIT */
/*
 * What bench/jpeg_limit.c and bench/profile_pipeline.c share: the clock,
 * the file list read into memory (FILE... arguments, or "-": names one a
 * line on stdin), and a full libturbojpeg decode to packed RGB with a
 * default decode's flags (accurate IDCT, fancy upsampling).
 */
#ifndef STOKER_BENCH_FILES_H
#define STOKER_BENCH_FILES_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <turbojpeg.h>

struct bench_file {
	unsigned char *data;
	unsigned long len;
};

static inline double bench_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int bench_read_file(const char *path, struct bench_file *f)
{
	FILE *fp = fopen(path, "rb");
	long n;

	if (!fp)
		return -errno;
	if (fseek(fp, 0, SEEK_END) < 0 || (n = ftell(fp)) <= 0 || fseek(fp, 0, SEEK_SET) < 0) {
		fclose(fp);
		return -EIO;
	}
	f->data = malloc((size_t)n);
	if (!f->data || fread(f->data, 1, (size_t)n, fp) != (size_t)n) {
		fclose(fp);
		return -EIO;
	}
	fclose(fp);
	f->len = (unsigned long)n;
	return 0;
}

/* Read the files named by argv[a..] (or on stdin after "-"); 0, or -1
 * after saying why (prefixed with `prog`). */
static inline int bench_load_files(int argc, char **argv, int a, const char *prog, struct bench_file **out,
				   size_t *count)
{
	struct bench_file *files = NULL;
	size_t n = 0, cap = 0;
	char line[4096];
	int from_stdin = a < argc && !strcmp(argv[a], "-");

	for (;;) {
		const char *path;
		int r;

		if (from_stdin) {
			if (!fgets(line, sizeof(line), stdin))
				break;
			line[strcspn(line, "\n")] = 0;
			if (!line[0])
				continue;
			path = line;
		} else {
			if (a >= argc)
				break;
			path = argv[a++];
		}
		if (n == cap) {
			struct bench_file *v;

			cap = cap ? 2 * cap : 1024;
			v = realloc(files, cap * sizeof(*files));
			if (!v) {
				fprintf(stderr, "%s: out of memory\n", prog);
				return -1;
			}
			files = v;
		}
		r = bench_read_file(path, &files[n]);
		if (r < 0) {
			fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(-r));
			return -1;
		}
		n++;
	}
	*out = files;
	*count = n;
	return 0;
}

static inline void bench_free_files(struct bench_file *files, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(files[i].data);
	free(files);
}

/* Decode every file once to RGB; pixels decoded, or -1 after saying why. */
static inline long long bench_decode_all(tjhandle tj, const struct bench_file *files, size_t n, unsigned char **buf,
					 size_t *cap, const char *prog)
{
	long long pixels = 0;

	for (size_t i = 0; i < n; i++) {
		int w, h, ss, cs;
		size_t need;

		if (tjDecompressHeader3(tj, files[i].data, files[i].len, &w, &h, &ss, &cs) < 0) {
			fprintf(stderr, "%s: header %zu: %s\n", prog, i, tjGetErrorStr2(tj));
			return -1;
		}
		need = (size_t)w * (size_t)h * 3;
		if (need > *cap) {
			free(*buf);
			*buf = malloc(need);
			*cap = *buf ? need : 0;
			if (!*buf)
				return -1;
		}
		if (tjDecompress2(tj, files[i].data, files[i].len, *buf, w, 0, h, TJPF_RGB, 0) < 0) {
			fprintf(stderr, "%s: decode %zu: %s\n", prog, i, tjGetErrorStr2(tj));
			return -1;
		}
		pixels += (long long)w * h;
	}
	return pixels;
}

#endif
