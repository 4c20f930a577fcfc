/* SPDX-License-Identifier: MIT */
/*
 * PNG with libspng: the image comes out in the file's own layout (SPNG_FMT_RAW,
 * 16-bit samples big-endian), a row at a time unless interlaced, and is
 * converted here, as Pillow's
 * convert("RGB") converts it: 1/2/4-bit grey scaled to 0..255, 16-bit grey
 * clipped at 255 (Pillow's I;16 to L), other 16-bit samples by their high
 * byte, palette indices past the PLTE black, alpha and tRNS ignored, no
 * gamma applied.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include <spng.h>

#include "image.h"

/* Ancillary chunks (text, ICC profiles) are not needed: bound what they may cost. */
#define PNG_MAX_CHUNK_BYTES (16u << 20)
#define PNG_MAX_CHUNK_CACHE (32u << 20)

/* One row of `w` pixels in the file's layout to RGBX. */
static void png_row(const struct spng_ihdr *h, const uint8_t *src, const uint8_t (*pal)[4], uint32_t w, uint8_t *dst)
{
	unsigned depth = h->bit_depth;

	switch (h->color_type) {
	case SPNG_COLOR_TYPE_GRAYSCALE:
	case SPNG_COLOR_TYPE_INDEXED:
		for (uint32_t x = 0; x < w; x++, dst += 4) {
			unsigned v;

			if (depth == 16) {
				v = src[2 * x] ? 255u : src[2 * x + 1];
			} else if (depth == 8) {
				v = src[x];
			} else {
				unsigned per = 8 / depth, shift = 8 - depth * (x % per + 1);

				v = (src[x / per] >> shift) & ((1u << depth) - 1);
				if (h->color_type == SPNG_COLOR_TYPE_GRAYSCALE)
					v = v * 255u / ((1u << depth) - 1);
			}
			if (h->color_type == SPNG_COLOR_TYPE_INDEXED) {
				memcpy(dst, pal[v], 4);
			} else {
				dst[0] = dst[1] = dst[2] = (uint8_t)v;
				dst[3] = 255;
			}
		}
		break;
	case SPNG_COLOR_TYPE_TRUECOLOR:
	case SPNG_COLOR_TYPE_TRUECOLOR_ALPHA:
	case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA: {
		unsigned channels = h->color_type == SPNG_COLOR_TYPE_TRUECOLOR         ? 3
				    : h->color_type == SPNG_COLOR_TYPE_TRUECOLOR_ALPHA ? 4
										       : 2;
		unsigned bytes = depth / 8, step = channels * bytes;
		bool grey = channels == 2;

		/* big-endian samples: the high byte comes first */
		for (uint32_t x = 0; x < w; x++, src += step, dst += 4) {
			dst[0] = src[0];
			dst[1] = grey ? src[0] : src[bytes];
			dst[2] = grey ? src[0] : src[2 * bytes];
			dst[3] = 255;
		}
		break;
	}
	}
}

/* A non-interlaced image a row at a time: one row of the file's layout in
 * scratch, converted while it is still in cache. */
static int decode_rows(struct image_buf *b, spng_ctx *ctx, const struct spng_ihdr *ihdr, const uint8_t (*pal)[4],
		       size_t row_bytes)
{
	struct spng_row_info info;
	int e, r;

	r = image_scratch(b, row_bytes);
	if (r < 0)
		return r;
	e = spng_decode_image(ctx, NULL, 0, SPNG_FMT_RAW, SPNG_DECODE_PROGRESSIVE);
	for (uint32_t y = 0; !e && y < ihdr->height; y++) {
		e = spng_get_row_info(ctx, &info);
		if (e)
			break;
		if (info.row_num != y)
			return image_fail(b, -EBADMSG, "PNG: rows out of order");
		/* SPNG_EOI comes with the last row */
		e = spng_decode_row(ctx, b->scratch, row_bytes);
		if (e && e != SPNG_EOI)
			break;
		png_row(ihdr, b->scratch, pal, ihdr->width, b->pixels + (size_t)y * ihdr->width * 4);
		if (e == SPNG_EOI)
			return y + 1 == ihdr->height ? 0
						     : image_fail(b, -EBADMSG, "PNG: image data ends at row %u", y + 1);
	}
	return e ? image_fail(b, -EBADMSG, "PNG: %s", spng_strerror(e)) : 0;
}

int png_decode(struct image_buf *b, const uint8_t *data, size_t len)
{
	uint8_t pal[256][4];
	struct spng_ihdr ihdr;
	struct spng_plte plte;
	size_t raw_size, row_bytes;
	spng_ctx *ctx;
	int e, r;

	ctx = spng_ctx_new(0);
	if (!ctx)
		return image_fail(b, -ENOMEM, "Out of memory for a PNG decoder");
	spng_set_chunk_limits(ctx, PNG_MAX_CHUNK_BYTES, PNG_MAX_CHUNK_CACHE);
	e = spng_set_png_buffer(ctx, data, len);
	if (!e)
		e = spng_get_ihdr(ctx, &ihdr);
	if (e) {
		r = image_fail(b, -EBADMSG, "PNG: %s", spng_strerror(e));
		goto out;
	}
	/* Before any pixel memory: the size the header claims. */
	r = image_alloc(b, ihdr.width, ihdr.height);
	if (r < 0)
		goto out;
	if (ihdr.color_type == SPNG_COLOR_TYPE_INDEXED) {
		e = spng_get_plte(ctx, &plte);
		if (e) {
			r = image_fail(b, -EBADMSG, "PNG: palette image without a usable PLTE: %s", spng_strerror(e));
			goto out;
		}
		/* Pillow's palette is black past the PLTE's entries. */
		memset(pal, 0, sizeof(pal));
		for (uint32_t i = 0; i < plte.n_entries && i < 256; i++) {
			pal[i][0] = plte.entries[i].red;
			pal[i][1] = plte.entries[i].green;
			pal[i][2] = plte.entries[i].blue;
		}
		for (unsigned i = 0; i < 256; i++)
			pal[i][3] = 255;
	}
	e = spng_decoded_image_size(ctx, SPNG_FMT_RAW, &raw_size);
	if (e) {
		r = image_fail(b, -EBADMSG, "PNG: %s", spng_strerror(e));
		goto out;
	}
	row_bytes = raw_size / ihdr.height;
	if (ihdr.interlace_method == SPNG_INTERLACE_NONE) {
		r = decode_rows(b, ctx, &ihdr, (const uint8_t(*)[4])pal, row_bytes);
		goto out;
	}
	/* Interlaced: the passes fill the whole image before any row is complete. */
	r = image_scratch(b, raw_size);
	if (r < 0)
		goto out;
	/* libspng puts the passes of packed (1/2/4-bit) rows together by OR-ing
	 * bits in: the buffer must start zeroed, not hold the last image. */
	memset(b->scratch, 0, raw_size);
	e = spng_decode_image(ctx, b->scratch, raw_size, SPNG_FMT_RAW, 0);
	if (e) {
		r = image_fail(b, -EBADMSG, "PNG: %s", spng_strerror(e));
		goto out;
	}
	for (uint32_t y = 0; y < ihdr.height; y++)
		png_row(&ihdr, b->scratch + y * row_bytes, (const uint8_t(*)[4])pal, ihdr.width,
			b->pixels + (size_t)y * ihdr.width * 4);
	r = 0;
out:
	spng_ctx_free(ctx);
	return r;
}
