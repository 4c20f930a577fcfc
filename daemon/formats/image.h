/* SPDX-License-Identifier: MIT */
/*
 * Image formats other than JPEG: told apart by their first bytes (never by
 * the file's name), each decoded whole into RGBX pixels (X = 255) with the
 * pixel values Pillow's Image.open(f).convert("RGB") gives: alpha and
 * transparency discarded (not composited), 16-bit samples taken as Pillow
 * takes them. JPEG keeps its crop-aware decoder (decode.h); augment.c runs
 * both kinds through the same crop, resize and float code.
 *
 * The decoders, one file each with the library that does the work:
 *   png.c   libspng        every PNG colour type and depth, interlaced too
 *   webp.c  libwebp        lossy, lossless, alpha; animated: the first frame
 *   tiff.c  libtiff        strips or tiles, any codec libtiff has, the first page
 *   bmp.c   (hand-written) Pillow's BMP variants; PPM/PGM (netpbm) too
 *
 * Hostile input: every decoder reads the image's size from its header and
 * refuses one over max_pixels before any pixel memory is committed, and
 * never writes or reads beyond the buffers the header's size gives, so a
 * decompression bomb costs at most max_pixels * 4 bytes and fails cleanly.
 *
 * One `struct image_buf` per thread, reused from image to image. Not thread
 * safe.
 */
#ifndef STOKER_IMAGE_H
#define STOKER_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decode.h"

enum image_format {
	IMAGE_UNKNOWN = 0,
	IMAGE_JPEG,
	IMAGE_PNG,
	IMAGE_WEBP,
	IMAGE_BMP,
	IMAGE_TIFF,
	IMAGE_PNM,
};

/* The format of the file that starts with these bytes; IMAGE_UNKNOWN if none. */
enum image_format image_sniff(const uint8_t *data, size_t len);
const char *image_format_name(enum image_format f);

/* A decoder's output and scratch; zero-initialised is ready to use. */
struct image_buf {
	uint8_t *pixels; /* RGBX, width * 4 bytes a row */
	size_t cap;
	uint8_t *scratch; /* a decoder's own rows before conversion */
	size_t scratch_cap;
	uint32_t width, height;
	uint64_t max_pixels; /* 0: DECODE_DEFAULT_MAX_PIXELS */
	char error[256];
};

void image_buf_release(struct image_buf *b);

/*
 * Decode all of `data` (len bytes), a file of format `f` (any but
 * IMAGE_JPEG and IMAGE_UNKNOWN), into b->pixels; *out points there.
 * -EBADMSG: corrupt, truncated or a variant this decoder refuses (the
 * reason in b->error); -E2BIG: over max_pixels; -ENOMEM; -EINVAL.
 */
int image_decode(struct image_buf *b, enum image_format f, const uint8_t *data, size_t len, struct decoded_region *out);

/* ---- for the decoders (png.c, webp.c, tiff.c, bmp.c) ---- */

/* Record the reason for an error; returns `code`. */
int image_fail(struct image_buf *b, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Make b->pixels hold width x height RGBX pixels after checking them against
 * max_pixels: -E2BIG (said in b->error) or -ENOMEM. */
int image_alloc(struct image_buf *b, uint32_t width, uint32_t height);
/* Make b->scratch hold `bytes`. */
int image_scratch(struct image_buf *b, size_t bytes);

static inline uint32_t image_le16(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static inline uint32_t image_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Netpbm's whitespace (Python's bytes.isspace()). */
static inline bool image_pnm_space(uint8_t c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Pillow's CMYK to RGB: R = (255 - K) - C * (255 - K) / 255, rounded. */
static inline uint8_t image_cmyk_channel(unsigned ink, unsigned k)
{
	unsigned nk = 255u - k, t = ink * nk + 128;

	return (uint8_t)(nk - ((t + (t >> 8)) >> 8));
}

int png_decode(struct image_buf *b, const uint8_t *data, size_t len);
int webp_decode(struct image_buf *b, const uint8_t *data, size_t len);
int tiff_decode(struct image_buf *b, const uint8_t *data, size_t len);
int bmp_decode(struct image_buf *b, const uint8_t *data, size_t len);
int pnm_decode(struct image_buf *b, const uint8_t *data, size_t len);

#endif
