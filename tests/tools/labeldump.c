/* SPDX-License-Identifier: MIT */
/*
 * labeldump: one label file read by instances_parse (daemon/data/instances.h),
 * for the tests against Ultralytics' verify_image_label (tests/ultralytics/).
 *
 *   labeldump -c NC [-s] [-k NKPT,NDIM] [-p] FILE
 *       -s single_cls; -k kpt_shape; -p task pose (keypoints read).
 *       Prints one JSON object: {"ok": true, "cls": [...], "box": [[cx, cy,
 *       w, h], ...], "seg": [[[x, y], ...], ...] or null, "kpt": [[[x, y,
 *       v], ...], ...] or null}, floats as float32 round-trips (%.9g), or
 *       {"ok": false, "why": "..."}.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "instances.h"
#include "labels.h"

static void num(float v)
{
	if (v != v)
		printf("NaN");
	else if (v > 3.4e38f || v < -3.4e38f)
		printf("%sInfinity", v < 0 ? "-" : "");
	else
		printf("%.9g", (double)v);
}

int main(int argc, char **argv)
{
	struct instances_spec spec = {0};
	struct instances in;
	char why[256], *text;
	size_t len;
	FILE *f;
	int opt, r;

	while ((opt = getopt(argc, argv, "c:sk:p")) != -1) {
		switch (opt) {
		case 'c': spec.num_classes = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 's': spec.single_cls = true; break;
		case 'k':
			if (sscanf(optarg, "%u,%u", &spec.nkpt, &spec.ndim) != 2)
				return 1;
			break;
		case 'p': spec.keypoint = true; break;
		default: return 1;
		}
	}
	if (optind != argc - 1)
		return 1;
	f = fopen(argv[optind], "rb");
	if (!f)
		return 1;
	text = malloc(LABELS_MAX_FILE_BYTES + 1);
	if (!text)
		return 1;
	len = fread(text, 1, LABELS_MAX_FILE_BYTES + 1, f);
	fclose(f);
	if (len > LABELS_MAX_FILE_BYTES)
		return 1;
	r = instances_parse(text, len, &spec, &in, why, sizeof(why));
	free(text);
	if (r == -ENOMEM)
		return 1;
	if (r < 0) {
		printf("{\"ok\": false, \"why\": \"");
		for (const char *p = why; *p; p++)
			printf(*p == '"' || *p == '\\'                 ? "\\%c"
			       : (unsigned char)*p < 0x20 || *p & 0x80 ? "?"
								       : "%c",
			       *p);
		printf("\"}\n");
		return 0;
	}
	printf("{\"ok\": true, \"cls\": [");
	for (uint32_t i = 0; i < in.n; i++) {
		printf(i ? ", " : "");
		num(in.cls[i]);
	}
	printf("], \"box\": [");
	for (uint32_t i = 0; i < in.n; i++) {
		printf(i ? ", [" : "[");
		for (int k = 0; k < 4; k++) {
			printf(k ? ", " : "");
			num(in.box[i * 4 + k]);
		}
		printf("]");
	}
	printf("], \"seg\": ");
	if (!in.seg_off) {
		printf("null");
	} else {
		printf("[");
		for (uint32_t i = 0; i < in.n; i++) {
			printf(i ? ", [" : "[");
			for (uint32_t p = in.seg_off[i]; p < in.seg_off[i + 1]; p++) {
				printf(p > in.seg_off[i] ? ", [" : "[");
				num(in.seg[2 * p]);
				printf(", ");
				num(in.seg[2 * p + 1]);
				printf("]");
			}
			printf("]");
		}
		printf("]");
	}
	printf(", \"kpt\": ");
	if (!in.kpt) {
		printf("null");
	} else {
		printf("[");
		for (uint32_t i = 0; i < in.n; i++) {
			printf(i ? ", [" : "[");
			for (uint32_t j = 0; j < spec.nkpt; j++) {
				const float *k = in.kpt + ((size_t)i * spec.nkpt + j) * 3;

				printf(j ? ", [" : "[");
				num(k[0]);
				printf(", ");
				num(k[1]);
				printf(", ");
				num(k[2]);
				printf("]");
			}
			printf("]");
		}
		printf("]");
	}
	printf("}\n");
	instances_clear(&in);
	return 0;
}
