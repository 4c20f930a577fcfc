/* SPDX-License-Identifier: MIT */
/*
 * TIFF with libtiff, read from memory; the first page only. libtiff
 * decompresses (any codec it has: none, LZW, deflate, PackBits, JPEG, ...)
 * and undoes predictors, fill order and byte order; the samples are turned
 * into RGBX here as Pillow's TiffImagePlugin and convert("RGB") do:
 *   grey (min-is-black/white) 1/2/4/8-bit, scaled and inverted as Pillow;
 *   16-bit grey clipped at 255 (Pillow's I;16; signed: clamped at 0 too);
 *   RGB and CMYK 8/16-bit (16-bit by the high byte), CMYK converted as
 *   Pillow converts it; palettes (16-bit colour map entries >> 8);
 *   extra samples dropped, associated (premultiplied) alpha divided out
 *   of RGB first, as Pillow's "RGBa" unpacking does (grey with it, which
 *   Pillow cannot convert, is refused);
 *   strips or tiles, contiguous or separate planes.
 * YCbCr goes through libtiff's RGBA interface (JPEG-compressed YCbCr is
 * decoded to RGB by libjpeg instead), as Pillow does. Floating-point,
 * 32-bit, 12-bit and CIE L*a*b* samples are refused with the reason.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <tiffio.h>

#include "image.h"

/* What libtiff itself may allocate at once (directory arrays, codec state). */
#define TIFF_MAX_ALLOC (256u << 20)
#define TIFF_MAX_SAMPLES 8u

struct mem {
	const uint8_t *data;
	size_t len, pos;
	struct image_buf *b;
};

static tsize_t mem_read(thandle_t h, tdata_t buf, tsize_t n)
{
	struct mem *m = h;
	size_t left = m->pos < m->len ? m->len - m->pos : 0, k;

	if (n < 0)
		return -1;
	k = (size_t)n < left ? (size_t)n : left;
	if (k == 0)
		return 0;
	memcpy(buf, m->data + m->pos, k);
	m->pos += k;
	return (tsize_t)k;
}

static tsize_t mem_write(thandle_t h, tdata_t buf, tsize_t n)
{
	(void)h;
	(void)buf;
	(void)n;
	return -1;
}

static toff_t mem_seek(thandle_t h, toff_t off, int whence)
{
	struct mem *m = h;
	uint64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : m->len;

	if (whence != SEEK_SET && whence != SEEK_CUR && whence != SEEK_END)
		return (toff_t)-1;
	/* toff_t is unsigned: a "negative" offset wraps, and lands past the end, where reads find nothing */
	if (base + off < base)
		return (toff_t)-1;
	m->pos = (size_t)(base + off);
	return m->pos;
}

static int mem_close(thandle_t h)
{
	(void)h;
	return 0;
}

static toff_t mem_size(thandle_t h)
{
	return ((struct mem *)h)->len;
}

/* Strips are read straight from the buffer, no copy. */
static int mem_map(thandle_t h, tdata_t *base, toff_t *size)
{
	struct mem *m = h;

	*base = (tdata_t)m->data;
	*size = m->len;
	return 1;
}

static void mem_unmap(thandle_t h, tdata_t base, toff_t size)
{
	(void)h;
	(void)base;
	(void)size;
}

/* libtiff's first error is the reason we give. */
static int on_error(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
	struct image_buf *b = user;

	(void)tif;
	if (!b->error[0]) {
		int n = snprintf(b->error, sizeof(b->error), "TIFF: %s: ", module ? module : "libtiff");

		if (n > 0 && (size_t)n < sizeof(b->error))
			vsnprintf(b->error + n, sizeof(b->error) - (size_t)n, fmt, ap);
	}
	return 1;
}

static int on_warning(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
	(void)tif;
	(void)user;
	(void)module;
	(void)fmt;
	(void)ap;
	return 1; /* not printed */
}

/* libtiff's message if it gave one, else ours. */
static int tiff_fail(struct image_buf *b, const char *what)
{
	if (b->error[0])
		return -EBADMSG;
	return image_fail(b, -EBADMSG, "TIFF: %s", what);
}

struct layout {
	uint32_t w, h;
	uint16_t bps, spp, photometric, planar, sampleformat, compression;
	uint16_t extra0; /* the first extra sample's kind: 1 associated alpha */
	bool has_extra;
	uint16_t *cmap[3];
};

/*
 * Rows of one plane (plane 0 of a contiguous image holds every sample) into
 * dst, `row_bytes` a row, from strips or tiles.
 */
static int read_plane(struct image_buf *b, TIFF *tif, const struct layout *l, uint16_t plane, uint8_t *dst,
		      uint64_t row_bytes, uint8_t *tile_buf, uint64_t tile_size)
{
	if (!TIFFIsTiled(tif)) {
		uint32_t rps;
		tstrip_t per_plane;

		TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rps);
		if (rps == 0 || rps > l->h)
			rps = l->h;
		per_plane = (tstrip_t)((l->h + rps - 1) / rps);
		for (tstrip_t s = 0; s < per_plane; s++) {
			uint32_t rows = l->h - s * rps < rps ? l->h - s * rps : rps;
			tmsize_t want = (tmsize_t)(rows * row_bytes);

			if (TIFFReadEncodedStrip(tif, plane * per_plane + s, dst + (uint64_t)s * rps * row_bytes,
						 want) != want)
				return tiff_fail(b, "truncated or corrupt strip");
		}
		return 0;
	}
	uint32_t tw, th;
	uint64_t tile_row;

	TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw);
	TIFFGetField(tif, TIFFTAG_TILELENGTH, &th);
	tile_row = (uint64_t)TIFFTileRowSize64(tif);
	if (tw == 0 || th == 0 || tile_row == 0)
		return tiff_fail(b, "bad tile size");
	for (uint32_t y = 0; y < l->h; y += th) {
		for (uint32_t x = 0; x < l->w; x += tw) {
			uint32_t rows = l->h - y < th ? l->h - y : th, cols = l->w - x < tw ? l->w - x : tw;
			uint64_t bits = (uint64_t)l->bps * (l->planar == PLANARCONFIG_CONTIG ? l->spp : 1);
			uint64_t at = (uint64_t)x * bits / 8, n = ((uint64_t)cols * bits + 7) / 8;

			if (TIFFReadEncodedTile(tif, TIFFComputeTile(tif, x, y, 0, plane), tile_buf,
						(tmsize_t)tile_size) != (tmsize_t)tile_size)
				return tiff_fail(b, "truncated or corrupt tile");
			for (uint32_t r = 0; r < rows; r++)
				memcpy(dst + (y + r) * row_bytes + at, tile_buf + r * tile_row, n);
		}
	}
	return 0;
}

/* Sample i of a row (8 or 16 bits), as Pillow's 8-bit value: 16-bit by its high byte. */
static inline unsigned sample8(const uint8_t *row, uint64_t i, unsigned bps)
{
	uint16_t v;

	if (bps == 8)
		return row[i];
	memcpy(&v, row + 2 * i, 2); /* libtiff gives native byte order */
	return v >> 8;
}

static inline uint8_t unpremultiply(unsigned c, unsigned a)
{
	unsigned v = c * 255u / a;

	return (uint8_t)(v > 255 ? 255 : v);
}

static void grey_row(const struct layout *l, const uint8_t *src, uint8_t *dst)
{
	unsigned max = (1u << l->bps) - 1;
	bool invert = l->photometric == PHOTOMETRIC_MINISWHITE;

	for (uint32_t x = 0; x < l->w; x++, dst += 4) {
		unsigned v;

		if (l->bps == 16) {
			uint16_t u;

			memcpy(&u, src + (uint64_t)x * l->spp * 2, 2);
			/* Pillow's I;16 (not inverted, even min-is-white) and I;16S to 8 bits: clipped */
			if (l->sampleformat == SAMPLEFORMAT_INT)
				v = (int16_t)u < 0 ? 0 : u > 255 ? 255 : u;
			else
				v = u > 255 ? 255 : u;
		} else if (l->bps == 8) {
			v = src[(uint64_t)x * l->spp];
			if (invert)
				v = 255 - v;
		} else {
			/* 1, 2 or 4 bits, one sample a pixel, most significant first */
			uint64_t bit = (uint64_t)x * l->bps;

			v = (src[bit / 8] >> (8 - l->bps - bit % 8)) & max;
			if (invert)
				v = max - v;
			v = v * 255 / max;
		}
		dst[0] = dst[1] = dst[2] = (uint8_t)v;
		dst[3] = 255;
	}
}

static void colour_row(const struct layout *l, const uint8_t *src, uint8_t *dst)
{
	bool assoc = l->has_extra && l->extra0 == EXTRASAMPLE_ASSOCALPHA && l->photometric == PHOTOMETRIC_RGB;

	for (uint32_t x = 0; x < l->w; x++, dst += 4) {
		uint64_t i = (uint64_t)x * l->spp;
		unsigned c0 = sample8(src, i, l->bps), c1 = sample8(src, i + 1, l->bps),
			 c2 = sample8(src, i + 2, l->bps);

		if (l->photometric == PHOTOMETRIC_SEPARATED) {
			unsigned k = sample8(src, i + 3, l->bps);

			dst[0] = image_cmyk_channel(c0, k);
			dst[1] = image_cmyk_channel(c1, k);
			dst[2] = image_cmyk_channel(c2, k);
		} else if (assoc) {
			unsigned a = sample8(src, i + 3, l->bps);

			dst[0] = a == 0 ? 0 : a == 255 ? (uint8_t)c0 : unpremultiply(c0, a);
			dst[1] = a == 0 ? 0 : a == 255 ? (uint8_t)c1 : unpremultiply(c1, a);
			dst[2] = a == 0 ? 0 : a == 255 ? (uint8_t)c2 : unpremultiply(c2, a);
		} else {
			dst[0] = (uint8_t)c0;
			dst[1] = (uint8_t)c1;
			dst[2] = (uint8_t)c2;
		}
		dst[3] = 255;
	}
}

static void palette_row(const struct layout *l, const uint8_t *src, uint8_t *dst)
{
	for (uint32_t x = 0; x < l->w; x++, dst += 4) {
		uint64_t bit = (uint64_t)x * l->spp * l->bps;
		unsigned v =
			l->bps == 8 ? src[bit / 8] : (src[bit / 8] >> (8 - l->bps - bit % 8)) & ((1u << l->bps) - 1);

		dst[0] = (uint8_t)(l->cmap[0][v] >> 8);
		dst[1] = (uint8_t)(l->cmap[1][v] >> 8);
		dst[2] = (uint8_t)(l->cmap[2][v] >> 8);
		dst[3] = 255;
	}
}

/* Which layouts the sample path takes; the reason for those it refuses. */
static const char *unsupported(const struct layout *l)
{
	if (l->sampleformat == SAMPLEFORMAT_IEEEFP || l->sampleformat == SAMPLEFORMAT_COMPLEXINT ||
	    l->sampleformat == SAMPLEFORMAT_COMPLEXIEEEFP)
		return "floating-point or complex samples";
	if (l->spp == 0 || l->spp > TIFF_MAX_SAMPLES)
		return "sample count";
	switch (l->photometric) {
	case PHOTOMETRIC_MINISBLACK:
	case PHOTOMETRIC_MINISWHITE:
		if (l->bps != 1 && l->bps != 2 && l->bps != 4 && l->bps != 8 && l->bps != 16)
			return "grey bit depth";
		if (l->bps < 8 && l->spp != 1)
			return "packed grey with extra samples";
		if (l->has_extra && l->extra0 == EXTRASAMPLE_ASSOCALPHA)
			return "grey with premultiplied alpha";
		return NULL;
	case PHOTOMETRIC_RGB: return l->spp < 3 || (l->bps != 8 && l->bps != 16) ? "RGB layout" : NULL;
	case PHOTOMETRIC_SEPARATED: return l->spp < 4 || (l->bps != 8 && l->bps != 16) ? "CMYK layout" : NULL;
	case PHOTOMETRIC_PALETTE:
		if (l->bps != 1 && l->bps != 2 && l->bps != 4 && l->bps != 8)
			return "palette bit depth";
		return l->bps < 8 && l->spp != 1 ? "packed palette with extra samples" : NULL;
	default: return "photometric interpretation";
	}
}

/* YCbCr (and old-style JPEG) through libtiff's RGBA interface, as Pillow does. */
static int read_rgba(struct image_buf *b, TIFF *tif, const struct layout *l)
{
	TIFFRGBAImage img;
	char emsg[1024];
	uint32_t *raster = (uint32_t *)(void *)b->pixels; /* malloc'd: aligned for uint32_t */
	size_t n = (size_t)l->w * l->h;
	int ok;

	if (!TIFFRGBAImageOK(tif, emsg) || !TIFFRGBAImageBegin(&img, tif, 1, emsg))
		return image_fail(b, -EBADMSG, "TIFF: %s", emsg);
	img.req_orientation = ORIENTATION_TOPLEFT;
	ok = TIFFRGBAImageGet(&img, raster, l->w, l->h);
	TIFFRGBAImageEnd(&img);
	if (!ok)
		return tiff_fail(b, "cannot decode as RGBA");
	for (size_t i = 0; i < n; i++) {
		uint32_t p = raster[i];

		b->pixels[i * 4] = (uint8_t)TIFFGetR(p);
		b->pixels[i * 4 + 1] = (uint8_t)TIFFGetG(p);
		b->pixels[i * 4 + 2] = (uint8_t)TIFFGetB(p);
		b->pixels[i * 4 + 3] = 255;
	}
	return 0;
}

static int read_samples(struct image_buf *b, TIFF *tif, const struct layout *l)
{
	uint64_t bits_pixel = (uint64_t)l->bps * l->spp, row_bytes = (l->w * bits_pixel + 7) / 8;
	uint64_t plane_row = l->planar == PLANARCONFIG_SEPARATE ? (uint64_t)l->w * l->bps / 8 : row_bytes;
	uint64_t image_bytes = row_bytes * l->h, plane_bytes = plane_row * l->h, tile_size = 0, need;
	uint8_t *rows, *plane, *tile;
	const char *why = unsupported(l);
	int r;

	if (why)
		return image_fail(b, -EBADMSG, "TIFF: unsupported %s (photometric %u, %u x %u-bit samples, format %u)",
				  why, l->photometric, l->spp, l->bps, l->sampleformat);
	if (l->planar == PLANARCONFIG_SEPARATE && l->bps % 8)
		return image_fail(b, -EBADMSG, "TIFF: unsupported %u-bit samples in separate planes", l->bps);
	if ((uint64_t)TIFFScanlineSize64(tif) != plane_row)
		return tiff_fail(b, "unexpected scanline size");
	if (TIFFIsTiled(tif)) {
		tile_size = (uint64_t)TIFFTileSize64(tif);
		/* tiles hang over the image's edges, but not by more than this */
		if (tile_size == 0 || tile_size > 4 * plane_bytes + (1u << 20))
			return tiff_fail(b, "tile size out of proportion to the image");
	}
	need = image_bytes + (l->planar == PLANARCONFIG_SEPARATE ? plane_bytes : 0) + tile_size;
	r = image_scratch(b, (size_t)need);
	if (r < 0)
		return r;
	rows = b->scratch;
	plane = rows + image_bytes;
	tile = plane + (l->planar == PLANARCONFIG_SEPARATE ? plane_bytes : 0);
	if (l->planar == PLANARCONFIG_SEPARATE) {
		unsigned sb = l->bps / 8;

		/* each plane read whole, then its samples put in their places */
		for (uint16_t s = 0; s < l->spp; s++) {
			r = read_plane(b, tif, l, s, plane, plane_row, tile, tile_size);
			if (r < 0)
				return r;
			for (uint64_t i = 0; i < (uint64_t)l->w * l->h; i++)
				memcpy(rows + (i * l->spp + s) * sb, plane + i * sb, sb);
		}
	} else {
		r = read_plane(b, tif, l, 0, rows, row_bytes, tile, tile_size);
		if (r < 0)
			return r;
	}
	for (uint32_t y = 0; y < l->h; y++) {
		const uint8_t *src = rows + y * row_bytes;
		uint8_t *dst = b->pixels + (size_t)y * l->w * 4;

		if (l->photometric == PHOTOMETRIC_PALETTE)
			palette_row(l, src, dst);
		else if (l->photometric == PHOTOMETRIC_RGB || l->photometric == PHOTOMETRIC_SEPARATED)
			colour_row(l, src, dst);
		else
			grey_row(l, src, dst);
	}
	return 0;
}

int tiff_decode(struct image_buf *b, const uint8_t *data, size_t len)
{
	struct mem m = {.data = data, .len = len, .b = b};
	struct layout l = {0};
	TIFFOpenOptions *opts;
	uint16_t nextra = 0, *extra = NULL;
	TIFF *tif = NULL;
	int r;

	opts = TIFFOpenOptionsAlloc();
	if (!opts)
		return image_fail(b, -ENOMEM, "Out of memory for a TIFF decoder");
	TIFFOpenOptionsSetMaxSingleMemAlloc(opts, TIFF_MAX_ALLOC);
	TIFFOpenOptionsSetErrorHandlerExtR(opts, on_error, b);
	TIFFOpenOptionsSetWarningHandlerExtR(opts, on_warning, b);
	tif = TIFFClientOpenExt("image", "r", &m, mem_read, mem_write, mem_seek, mem_close, mem_size, mem_map,
				mem_unmap, opts);
	TIFFOpenOptionsFree(opts);
	if (!tif)
		return tiff_fail(b, "cannot read the header");

	if (!TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &l.w) || !TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &l.h)) {
		r = tiff_fail(b, "no image size");
		goto out;
	}
	/* Before any pixel memory: the size the header claims. */
	r = image_alloc(b, l.w, l.h);
	if (r < 0)
		goto out;
	TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &l.bps);
	TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &l.spp);
	TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &l.planar);
	TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &l.sampleformat);
	TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &l.compression);
	if (!TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &l.photometric))
		l.photometric = PHOTOMETRIC_MINISWHITE; /* Pillow's default for the missing tag */
	if (TIFFGetFieldDefaulted(tif, TIFFTAG_EXTRASAMPLES, &nextra, &extra) && nextra > 0 && extra) {
		l.has_extra = true;
		l.extra0 = extra[0];
	}
	if (l.photometric == PHOTOMETRIC_PALETTE &&
	    !TIFFGetField(tif, TIFFTAG_COLORMAP, &l.cmap[0], &l.cmap[1], &l.cmap[2])) {
		r = tiff_fail(b, "palette image without a colour map");
		goto out;
	}

	if (l.compression == COMPRESSION_OJPEG ||
	    (l.photometric == PHOTOMETRIC_YCBCR &&
	     (l.compression != COMPRESSION_JPEG || l.planar != PLANARCONFIG_CONTIG))) {
		r = read_rgba(b, tif, &l);
	} else {
		if (l.photometric == PHOTOMETRIC_YCBCR) {
			/* libjpeg converts to RGB, as Pillow has it do */
			if (!TIFFSetField(tif, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB)) {
				r = tiff_fail(b, "cannot have JPEG data converted to RGB");
				goto out;
			}
			l.photometric = PHOTOMETRIC_RGB;
		}
		r = read_samples(b, tif, &l);
	}
out:
	TIFFClose(tif);
	return r;
}
