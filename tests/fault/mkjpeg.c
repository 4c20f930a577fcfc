/* SPDX-License-Identifier: MIT */
/*
 * mkjpeg: JPEG files Pillow cannot write, for the hostile-file tests
 * (tests/integration/test_hostile.py), made with libjpeg's own encoder.
 *
 *   mkjpeg KIND WIDTH HEIGHT OUT
 *
 *   baseline   an ordinary baseline file (gray and cmyk: other colour spaces)
 *   arith      arithmetic-coded baseline, YCbCr
 *   scans      progressive with the longest valid scan script: every AC
 *              coefficient of every component in its own scan, refined one
 *              bit at a time (thousands of scans for a colour image)
 *   progressive an ordinary progressive file (jpeg_simple_progression)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

static uint8_t pixel(uint32_t x, uint32_t y, int c)
{
	return (uint8_t)((x * 7 + y * 3 + (uint32_t)c * 50 + ((x / 9) ^ (y / 7)) * 13) & 0xFF);
}

/* DC then, per component, each AC coefficient first at Al = 10 and then
 * refined down to Al = 0: 11 DC scans, 11 per coefficient. */
static jpeg_scan_info *many_scans(int comps, int *n)
{
	const int al_max = 10; /* MAX_AH_AL for 8-bit samples */
	int count = (al_max + 1) + comps * 63 * (al_max + 1), k = 0;
	jpeg_scan_info *s = calloc((size_t)count, sizeof(*s));

	if (!s)
		return NULL;
	for (int al = al_max; al >= 0; al--) {
		s[k].comps_in_scan = comps;
		for (int c = 0; c < comps; c++)
			s[k].component_index[c] = c;
		s[k].Ss = s[k].Se = 0;
		s[k].Ah = al == al_max ? 0 : al + 1;
		s[k].Al = al;
		k++;
	}
	for (int c = 0; c < comps; c++) {
		for (int coef = 1; coef <= 63; coef++) {
			for (int al = al_max; al >= 0; al--) {
				s[k].comps_in_scan = 1;
				s[k].component_index[0] = c;
				s[k].Ss = s[k].Se = coef;
				s[k].Ah = al == al_max ? 0 : al + 1;
				s[k].Al = al;
				k++;
			}
		}
	}
	*n = k;
	return s;
}

int main(int argc, char **argv)
{
	struct jpeg_compress_struct c;
	struct jpeg_error_mgr e;
	jpeg_scan_info *scans = NULL;
	uint32_t w, h;
	uint8_t *row;
	FILE *f;

	if (argc != 5) {
		fprintf(stderr, "usage: mkjpeg baseline|gray|cmyk|arith|scans|progressive WIDTH HEIGHT OUT\n");
		return 2;
	}
	w = (uint32_t)strtoul(argv[2], NULL, 10);
	h = (uint32_t)strtoul(argv[3], NULL, 10);
	row = malloc((size_t)w * 4);
	f = fopen(argv[4], "wbe");
	if (!row || !f || !w || !h) {
		perror("mkjpeg");
		return 1;
	}
	c.err = jpeg_std_error(&e);
	jpeg_create_compress(&c);
	jpeg_stdio_dest(&c, f);
	c.image_width = w;
	c.image_height = h;
	c.input_components = !strcmp(argv[1], "gray") ? 1 : !strcmp(argv[1], "cmyk") ? 4 : 3;
	c.in_color_space = c.input_components == 1 ? JCS_GRAYSCALE : c.input_components == 4 ? JCS_CMYK : JCS_RGB;
	jpeg_set_defaults(&c);
	jpeg_set_quality(&c, 90, TRUE);
	if (!strcmp(argv[1], "baseline") || !strcmp(argv[1], "gray") || !strcmp(argv[1], "cmyk")) {
		/* the defaults */
	} else if (!strcmp(argv[1], "arith")) {
		c.arith_code = TRUE;
	} else if (!strcmp(argv[1], "progressive")) {
		jpeg_simple_progression(&c);
	} else if (!strcmp(argv[1], "scans")) {
		int n = 0;

		scans = many_scans(c.num_components, &n);
		if (!scans)
			return 1;
		c.scan_info = scans;
		c.num_scans = n;
		c.optimize_coding = TRUE; /* one Huffman table per scan's needs */
		fprintf(stderr, "mkjpeg: %d scans\n", n);
	} else {
		fprintf(stderr, "mkjpeg: unknown kind %s\n", argv[1]);
		return 2;
	}
	jpeg_start_compress(&c, TRUE);
	while (c.next_scanline < h) {
		JSAMPROW r = row;

		for (uint32_t x = 0; x < w; x++)
			for (int k = 0; k < c.input_components; k++)
				row[x * (uint32_t)c.input_components + (uint32_t)k] = pixel(x, c.next_scanline, k);
		jpeg_write_scanlines(&c, &r, 1);
	}
	jpeg_finish_compress(&c);
	jpeg_destroy_compress(&c);
	free(scans);
	free(row);
	return fclose(f) == 0 ? 0 : 1;
}
