/* SPDX-License-Identifier: MIT */
/* Image headers (header.c): sizes of every format from hand-built bytes,
 * the EXIF orientation of JPEG APP1 in both byte orders, hostile EXIF
 * (offsets out of the segment, absurd counts, wrong types), and the
 * pixel transforms of all eight orientations against their definition
 * (Pillow's exif_transpose; tests/integration/test_detect_exif.py
 * compares whole photos with cv2). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "header.h"

/* A JPEG: SOI, an APP1 with `exif` (len bytes, the payload after the
 * length), SOF0 of 640 x 480 (w x h), EOI. */
static size_t jpeg_with(uint8_t *out, const uint8_t *exif, size_t len)
{
	static const uint8_t sof[] = {0xFF, 0xC0, 0, 17,   8, 0x01, 0xE0, 0x02, 0x80, 3,   1,
				      0x22, 0,    2, 0x11, 1, 3,    0x11, 1,    0xFF, 0xD9};
	size_t n = 0;

	out[n++] = 0xFF;
	out[n++] = 0xD8;
	if (exif) {
		out[n++] = 0xFF;
		out[n++] = 0xE1;
		out[n++] = (uint8_t)((len + 2) >> 8);
		out[n++] = (uint8_t)(len + 2);
		memcpy(out + n, exif, len);
		n += len;
	}
	memcpy(out + n, sof, sizeof(sof));
	return n + sizeof(sof);
}

/* "Exif\0\0" and a TIFF structure whose IFD0 holds one entry. */
static size_t exif_one(uint8_t *out, bool big, uint16_t tag, uint16_t type, uint32_t count, uint16_t value,
		       uint32_t ifd_offset)
{
	uint8_t *t = out + 6;

	memcpy(out, "Exif\0\0", 6);
	memset(t, 0, 26);
	if (big) {
		memcpy(t, "MM\0\x2a", 4);
		t[4] = (uint8_t)(ifd_offset >> 24), t[5] = (uint8_t)(ifd_offset >> 16);
		t[6] = (uint8_t)(ifd_offset >> 8), t[7] = (uint8_t)ifd_offset;
		t[9] = 1; /* one entry */
		t[10] = (uint8_t)(tag >> 8), t[11] = (uint8_t)tag, t[12] = 0, t[13] = (uint8_t)type;
		t[14] = (uint8_t)(count >> 24), t[15] = (uint8_t)(count >> 16), t[16] = (uint8_t)(count >> 8);
		t[17] = (uint8_t)count, t[18] = (uint8_t)(value >> 8), t[19] = (uint8_t)value;
	} else {
		memcpy(t, "II\x2a\0", 4);
		t[4] = (uint8_t)ifd_offset, t[5] = (uint8_t)(ifd_offset >> 8);
		t[6] = (uint8_t)(ifd_offset >> 16), t[7] = (uint8_t)(ifd_offset >> 24);
		t[8] = 1;
		t[10] = (uint8_t)tag, t[11] = (uint8_t)(tag >> 8), t[12] = (uint8_t)type;
		t[14] = (uint8_t)count, t[15] = (uint8_t)(count >> 8), t[16] = (uint8_t)(count >> 16);
		t[17] = (uint8_t)(count >> 24), t[18] = (uint8_t)value, t[19] = (uint8_t)(value >> 8);
	}
	return 6 + 26;
}

static unsigned orientation_of(const uint8_t *exif, size_t len)
{
	uint8_t jpeg[256];
	size_t n = jpeg_with(jpeg, exif, len);
	struct image_header h;

	assert_int_equal(image_header_mem(jpeg, n, &h), 0);
	assert_int_equal(h.format, IMAGE_JPEG);
	assert_int_equal(h.width, 640);
	assert_int_equal(h.height, 480);
	return h.orientation;
}

static void test_jpeg_orientation_both_byte_orders(void **state)
{
	uint8_t e[64];

	(void)state;
	assert_int_equal(orientation_of(NULL, 0), 1);
	for (uint16_t o = 1; o <= 8; o++) {
		assert_int_equal(orientation_of(e, exif_one(e, false, 0x0112, 3, 1, o, 8)), o);
		assert_int_equal(orientation_of(e, exif_one(e, true, 0x0112, 3, 1, o, 8)), o);
	}
}

static void test_hostile_exif_counts_as_none(void **state)
{
	uint8_t e[64];
	size_t n;

	(void)state;
	assert_int_equal(orientation_of(e, exif_one(e, false, 0x0112, 3, 1, 9, 8)), 1); /* no such value */
	assert_int_equal(orientation_of(e, exif_one(e, false, 0x0112, 3, 1, 0, 8)), 1);
	/* cv2 reads the first two value bytes whatever the type and count */
	assert_int_equal(orientation_of(e, exif_one(e, false, 0x0112, 2, 1, 6, 8)), 6);
	assert_int_equal(orientation_of(e, exif_one(e, true, 0x0112, 4, 0, 6, 8)), 6);
	assert_int_equal(orientation_of(e, exif_one(e, false, 0x0110, 3, 1, 6, 8)), 1); /* another tag */
	assert_int_equal(orientation_of(e, exif_one(e, false, 0x0112, 3, 1, 6, 4)), 1); /* IFD in the header */
	assert_int_equal(orientation_of(e, exif_one(e, false, 0x0112, 3, 1, 6, 0xFFFFFFF0u)), 1); /* far away */
	assert_int_equal(orientation_of(e, exif_one(e, true, 0x0112, 3, 1, 6, 20)), 1);           /* past the segment */
	/* the entry cut off by the segment's end: not read from the next marker */
	n = exif_one(e, false, 0x0112, 3, 1, 6, 8);
	assert_int_equal(orientation_of(e, n - 8), 1);
	/* an absurd entry count, the segment ends first */
	n = exif_one(e, false, 0x0112, 3, 1, 6, 8);
	e[6 + 8] = 0xFF, e[6 + 9] = 0xFF;
	assert_int_equal(orientation_of(e, n), 6);
	/* not "Exif": an XMP APP1 is no orientation */
	n = exif_one(e, false, 0x0112, 3, 1, 6, 8);
	memcpy(e, "XMP\0\0\0", 6);
	assert_int_equal(orientation_of(e, n), 1);
}

static void check_size(const uint8_t *data, size_t len, enum image_format f, uint32_t w, uint32_t h)
{
	struct image_header hd = {0};
	int fd = memfd_create("header", MFD_CLOEXEC);

	assert_int_equal(image_header_mem(data, len, &hd), 0);
	assert_int_equal(hd.format, f);
	assert_int_equal(hd.width, w);
	assert_int_equal(hd.height, h);
	assert_int_equal(hd.orientation, 1);
	/* the same through a file, and nothing from any truncation of it */
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	memset(&hd, 0, sizeof(hd));
	assert_int_equal(image_header_fd(fd, &hd), 0);
	assert_int_equal(hd.width, w);
	close(fd);
	for (size_t n = 0; n < len && n < 14; n++)
		assert_int_equal(image_header_mem(data, n, &hd), -EBADMSG);
}

static void test_sizes_of_other_formats(void **state)
{
	static const uint8_t png[] = {0x89, 'P', 'N',  'G', '\r', '\n', 0x1A, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R', 0,
				      0,    1,   0x2C, 0,   0,    0,    200,  8,    2, 0, 0, 0,  0,   0,   0,   0};
	static const uint8_t vp8[] = {
		'R', 'I', 'F', 'F', 22, 0, 0, 0, 'W',  'E',  'B',  'P',  'V',  'P',  '8',
		' ', 10,  0,   0,   0,  0, 0, 0, 0x9d, 0x01, 0x2a, 0x40, 0x01, 0xF0, 0x40 /* 320 x 240, scale bits */};
	static const uint8_t vp8l[] = {
		'R', 'I', 'F', 'F', 18, 0,    0,  0,    'W',  'E', 'B', 'P', 'V', 'P', '8',
		'L', 5,   0,   0,   0,  0x2f, 99, 0x40, 0x1F, 0,   0,   0,   0,   0,   0 /* 100 x 126 */};
	static const uint8_t vp8x[] = {
		'R', 'I', 'F', 'F', 22,   0, 0, 0, 'W',  'E',  'B', 'P',  'V', 'P', '8', 'X',
		10,  0,   0,   0,   0x08, 0, 0, 0, 0xFF, 0x0F, 0,   0x01, 0,   0 /* 4096 x 2, EXIF flag but no chunk */};
	static const uint8_t bmp_info[] = {
		'B', 'M', 0,  0, 0, 0,  0, 0, 0, 0,    54,   0,    0,
		0,   40,  0,  0, 0, 33, 0, 0, 0, 0xF9, 0xFF, 0xFF, 0xFF /* 33 x -7: top-down */,
		1,   0,   24, 0};
	static const uint8_t bmp_core[] = {'B', 'M', 0, 0, 0, 0, 0, 0, 0, 0, 26, 0,  0,
					   0,   12,  0, 0, 0, 5, 1, 3, 0, 1, 0,  24, 0 /* 261 x 3 */};
	static const uint8_t tiff_le[] = {
		'I',  'I',  42, 0, 8, 0, 0,    0,    3,    0,    0x00, 0x01,
		3,    0,    1,  0, 0, 0, 0x20, 0x03, 0,    0,              /* width 800 SHORT */
		0x01, 0x01, 4,  0, 1, 0, 0,    0,    0x58, 0x02, 0,    0,  /* height 600 LONG */
		0x12, 0x01, 3,  0, 1, 0, 0,    0,    6,    0,    0,    0}; /* orientation: not applied */
	static const uint8_t pnm[] = "P6 # a comment\n# another\n 1234\t\n567 255\n";

	(void)state;
	check_size(png, sizeof(png), IMAGE_PNG, 300, 200);
	check_size(vp8, sizeof(vp8), IMAGE_WEBP, 320, 240);
	check_size(vp8l, sizeof(vp8l), IMAGE_WEBP, 100, 126);
	check_size(vp8x, sizeof(vp8x), IMAGE_WEBP, 4096, 2);
	check_size(bmp_info, sizeof(bmp_info), IMAGE_BMP, 33, 7);
	check_size(bmp_core, sizeof(bmp_core), IMAGE_BMP, 261, 3);
	check_size(tiff_le, sizeof(tiff_le), IMAGE_TIFF, 800, 600);
	check_size(pnm, sizeof(pnm) - 1, IMAGE_PNM, 1234, 567);
}

static void test_unknown_and_sizeless(void **state)
{
	static const uint8_t junk[] = "GIF89a....";
	static const uint8_t png_zero[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n', 0, 0, 0, 13,
					   'I',  'H', 'D', 'R', 0,    0,    0,    0,    0, 0, 0, 9};
	static const uint8_t jpeg_scan_first[] = {0xFF, 0xD8, 0xFF, 0xDA, 0, 2, 0xFF, 0xD9};
	struct image_header h = {.width = 77};

	(void)state;
	assert_int_equal(image_header_mem(junk, sizeof(junk), &h), -EBADMSG);
	assert_int_equal(image_header_mem(png_zero, sizeof(png_zero), &h), -EBADMSG);
	assert_int_equal(image_header_mem(jpeg_scan_first, sizeof(jpeg_scan_first), &h), -EBADMSG);
	assert_int_equal(image_header_mem(NULL, 0, &h), -EBADMSG);
	assert_int_equal(h.width, 77); /* untouched on failure */
}

static void test_orient_pixels(void **state)
{
	enum { W = 3, H = 2 };
	uint8_t src[W * H * 4], *buf = NULL;
	size_t cap = 0;
	struct decoded_region in = {src, W * 4, W, H}, out;

	(void)state;
	for (int i = 0; i < W * H; i++)
		memset(src + i * 4, i + 1, 4); /* pixel (x, y) is 1 + y * W + x */
	/* Each orientation's result, row by row, by exif_transpose's definition:
	 * source  1 2 3
	 *         4 5 6 */
	static const struct {
		unsigned o, w, h;
		uint8_t px[W * H];
	} want[] = {
		{1, 3, 2, {1, 2, 3, 4, 5, 6}}, {2, 3, 2, {3, 2, 1, 6, 5, 4}}, {3, 3, 2, {6, 5, 4, 3, 2, 1}},
		{4, 3, 2, {4, 5, 6, 1, 2, 3}}, {5, 2, 3, {1, 4, 2, 5, 3, 6}}, {6, 2, 3, {4, 1, 5, 2, 6, 3}},
		{7, 2, 3, {6, 3, 5, 2, 4, 1}}, {8, 2, 3, {3, 6, 2, 5, 1, 4}},
	};
	for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
		assert_int_equal(image_orient(&in, want[k].o, &buf, &cap, &out), 0);
		assert_int_equal(out.width, want[k].w);
		assert_int_equal(out.height, want[k].h);
		for (unsigned y = 0; y < out.height; y++)
			for (unsigned x = 0; x < out.width; x++)
				assert_int_equal(out.pixels[y * out.stride + x * 4], want[k].px[y * out.width + x]);
	}
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_jpeg_orientation_both_byte_orders),
		cmocka_unit_test(test_hostile_exif_counts_as_none),
		cmocka_unit_test(test_sizes_of_other_formats),
		cmocka_unit_test(test_unknown_and_sizeless),
		cmocka_unit_test(test_orient_pixels),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
