/* SPDX-License-Identifier: MIT */
/*
 * Windows BMP, by hand (no Debian library decodes it), following Pillow's
 * BmpImagePlugin rule for rule so that pixels match its convert("RGB"):
 * headers of 12 (OS/2 v1), 40, 52, 56, 64, 108 and 124 bytes; 1-, 4- and
 * 8-bit palettes (a palette that is a grey ramp gives the index itself as
 * grey, as Pillow's "L" does), 16-bit 5-5-5 and 5-6-5, 24-bit, 32-bit with
 * the channel layouts Pillow knows (alpha ignored), RLE8 and RLE4 (pixels
 * the runs skip are index 0), bottom-up or top-down rows. Everything else
 * (JPEG or PNG inside, other bit fields, 2-bit pixels, the grey-palette
 * layouts Pillow misreads) is refused with the reason.
 *
 * Every read is checked against the file's length before it is made.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "image.h"

enum { BMP_RAW = 0, BMP_RLE8 = 1, BMP_RLE4 = 2, BMP_BITFIELDS = 3 };

struct bmp {
	uint32_t width, height, header, bits, compression, colors;
	bool top_down;
	uint32_t masks[4]; /* r, g, b, a */
	/* how one pixel becomes RGB */
	enum { PIX_INDEX, PIX_GREY, PIX_BW, PIX_555, PIX_565, PIX_BYTES } kind;
	unsigned rgb_at[3]; /* PIX_BYTES: the byte offset of R, G and B in a pixel */
	uint8_t pal[256][4];
};

/* Pillow's 32-bit bit fields (r, g, b, a masks) and where R, G, B sit in a pixel's bytes. */
static const struct {
	uint32_t m[4];
	unsigned at[3];
} masks32[] = {
	{{0xFF0000, 0xFF00, 0xFF, 0}, {2, 1, 0}},          /* BGRX */
	{{0xFF000000, 0xFF0000, 0xFF00, 0}, {3, 2, 1}},    /* XBGR */
	{{0xFF000000, 0xFF00, 0xFF, 0}, {3, 1, 0}},        /* BGXR */
	{{0xFF000000, 0xFF0000, 0xFF00, 0xFF}, {3, 2, 1}}, /* ABGR */
	{{0xFF, 0xFF00, 0xFF0000, 0xFF000000}, {0, 1, 2}}, /* RGBA */
	{{0xFF0000, 0xFF00, 0xFF, 0xFF000000}, {2, 1, 0}}, /* BGRA */
	{{0xFF000000, 0xFF00, 0xFF, 0xFF0000}, {3, 1, 0}}, /* BGAR */
	{{0, 0, 0, 0}, {2, 1, 0}},                         /* BGRA */
};

static int bmp_header(struct image_buf *b, const uint8_t *d, size_t len, struct bmp *m, size_t *palette_at)
{
	const uint8_t *h = d + 14;

	if (len < 18)
		return image_fail(b, -EBADMSG, "BMP: truncated header");
	m->header = image_le32(h);
	if (m->header == 12) {
		if (len < 14 + 12)
			return image_fail(b, -EBADMSG, "BMP: truncated header");
		m->width = image_le16(h + 4);
		m->height = image_le16(h + 6);
		m->bits = image_le16(h + 10);
		m->compression = BMP_RAW;
		m->colors = 0;
	} else if (m->header == 40 || m->header == 52 || m->header == 56 || m->header == 64 || m->header == 108 ||
		   m->header == 124) {
		if (len < 14 + (size_t)m->header)
			return image_fail(b, -EBADMSG, "BMP: truncated header");
		m->width = image_le32(h + 4);
		/* a negative height (top byte 0xFF, as Pillow tests it) means rows top-down */
		m->top_down = h[11] == 0xFF;
		m->height = m->top_down ? (uint32_t)(0u - image_le32(h + 8)) : image_le32(h + 8);
		m->bits = image_le16(h + 14);
		m->compression = image_le32(h + 16);
		m->colors = image_le32(h + 32);
		if (m->compression == BMP_BITFIELDS) {
			const uint8_t *mp = h + 40; /* in the header from 52 bytes on, else just after it */

			if (m->header == 40 && len < 14 + 40 + 12)
				return image_fail(b, -EBADMSG, "BMP: truncated bit fields");
			for (int i = 0; i < 3; i++)
				m->masks[i] = image_le32(mp + 4 * i);
			m->masks[3] = m->header >= 56 ? image_le32(mp + 12) : 0;
		}
	} else {
		return image_fail(b, -EBADMSG, "BMP: unsupported header type (%u bytes)", m->header);
	}
	*palette_at = 14 + (size_t)m->header;
	return 0;
}

/* Pillow's mode from the bit depth, compression and bit fields. */
static int bmp_layout(struct image_buf *b, struct bmp *m)
{
	if (m->bits != 1 && m->bits != 4 && m->bits != 8 && m->bits != 16 && m->bits != 24 && m->bits != 32)
		return image_fail(b, -EBADMSG, "BMP: unsupported pixel depth (%u)", m->bits);
	m->kind = m->bits <= 8 ? PIX_INDEX : m->bits == 16 ? PIX_555 : PIX_BYTES;
	m->rgb_at[0] = 2;
	m->rgb_at[1] = 1;
	m->rgb_at[2] = 0;
	switch (m->compression) {
	case BMP_RAW: return 0;
	case BMP_RLE8:
	case BMP_RLE4:
		if (m->bits != (m->compression == BMP_RLE8 ? 8u : 4u))
			return image_fail(b, -EBADMSG, "BMP: RLE%u with %u-bit pixels",
					  m->compression == BMP_RLE8 ? 8 : 4, m->bits);
		return 0;
	case BMP_BITFIELDS:
		if (m->bits == 32) {
			for (size_t i = 0; i < sizeof(masks32) / sizeof(masks32[0]); i++) {
				if (!memcmp(m->masks, masks32[i].m, sizeof(m->masks))) {
					memcpy(m->rgb_at, masks32[i].at, sizeof(m->rgb_at));
					return 0;
				}
			}
		} else if (m->bits == 24 && m->masks[0] == 0xFF0000 && m->masks[1] == 0xFF00 && m->masks[2] == 0xFF) {
			return 0;
		} else if (m->bits == 16 && m->masks[1] == 0x7E0 && m->masks[0] == 0xF800 && m->masks[2] == 0x1F) {
			m->kind = PIX_565;
			return 0;
		} else if (m->bits == 16 && m->masks[1] == 0x3E0 && m->masks[0] == 0x7C00 && m->masks[2] == 0x1F) {
			return 0;
		}
		return image_fail(b, -EBADMSG, "BMP: unsupported bit fields layout (%u-bit, masks %#x %#x %#x %#x)",
				  m->bits, m->masks[0], m->masks[1], m->masks[2], m->masks[3]);
	default: return image_fail(b, -EBADMSG, "BMP: unsupported compression (%u)", m->compression);
	}
}

/* The palette, or Pillow's grey shortcut for it. */
static int bmp_palette(struct image_buf *b, const uint8_t *d, size_t len, size_t at, struct bmp *m)
{
	unsigned entry = m->header == 12 ? 3 : 4;
	uint32_t colors = m->colors ? m->colors : 1u << m->bits;
	bool grey = true;

	if (colors > 65536)
		return image_fail(b, -EBADMSG, "BMP: unsupported palette size (%u)", colors);
	m->colors = colors;
	if (at > len || (len - at) / entry < colors)
		return image_fail(b, -EBADMSG, "BMP: truncated palette");
	memset(m->pal, 0, sizeof(m->pal));
	for (uint32_t i = 0; i < colors; i++) {
		const uint8_t *e = d + at + (size_t)i * entry;
		unsigned want = colors == 2 ? (i ? 255u : 0u) : (i & 255u); /* Pillow compares with o8(i) */

		/* grey when entry i is (i, i, i), or black and white for two colours */
		if (e[0] != want || e[1] != want || e[2] != want)
			grey = false;
		if (i < 256) {
			m->pal[i][0] = e[2];
			m->pal[i][1] = e[1];
			m->pal[i][2] = e[0];
		}
	}
	for (unsigned i = 0; i < 256; i++)
		m->pal[i][3] = 255;
	if (!grey)
		return 0;
	/* Pillow then reads the pixels as "1" (one bit each) or "L" (a byte
	 * each) whatever their real depth: right only for these two. */
	if (colors <= 2 && m->bits == 1)
		m->kind = PIX_BW;
	else if (colors > 2 && m->bits == 8)
		m->kind = PIX_GREY;
	else if (m->compression == BMP_RAW)
		return image_fail(b, -EBADMSG, "BMP: %u-bit pixels with a %u-entry grey palette (misread by Pillow)",
				  m->bits, colors);
	else
		m->kind = colors <= 2 ? PIX_BW : PIX_GREY;
	return 0;
}

static inline void put_index(const struct bmp *m, unsigned v, uint8_t *dst)
{
	if (m->kind == PIX_INDEX) {
		memcpy(dst, m->pal[v], 4);
		return;
	}
	if (m->kind == PIX_BW)
		v = v ? 255 : 0;
	dst[0] = dst[1] = dst[2] = (uint8_t)v;
	dst[3] = 255;
}

/* Pillow's 5-bit to 8-bit: v * 255 / 31, truncated (6-bit green: / 63). */
static void bmp_row(const struct bmp *m, const uint8_t *src, uint32_t w, uint8_t *dst)
{
	switch (m->kind) {
	case PIX_INDEX:
	case PIX_GREY:
	case PIX_BW:
		for (uint32_t x = 0; x < w; x++, dst += 4) {
			unsigned v;

			if (m->bits == 8)
				v = src[x];
			else if (m->bits == 4)
				v = (src[x / 2] >> (x % 2 ? 0 : 4)) & 15;
			else
				v = (src[x / 8] >> (7 - x % 8)) & 1;
			put_index(m, v, dst);
		}
		break;
	case PIX_555:
	case PIX_565:
		for (uint32_t x = 0; x < w; x++, src += 2, dst += 4) {
			unsigned p = image_le16(src);

			if (m->kind == PIX_555) {
				dst[0] = (uint8_t)(((p >> 10) & 31) * 255 / 31);
				dst[1] = (uint8_t)(((p >> 5) & 31) * 255 / 31);
			} else {
				dst[0] = (uint8_t)(((p >> 11) & 31) * 255 / 31);
				dst[1] = (uint8_t)(((p >> 5) & 63) * 255 / 63);
			}
			dst[2] = (uint8_t)((p & 31) * 255 / 31);
			dst[3] = 255;
		}
		break;
	case PIX_BYTES: {
		unsigned step = m->bits / 8;

		for (uint32_t x = 0; x < w; x++, src += step, dst += 4) {
			dst[0] = src[m->rgb_at[0]];
			dst[1] = src[m->rgb_at[1]];
			dst[2] = src[m->rgb_at[2]];
			dst[3] = 255;
		}
		break;
	}
	}
}

/* Row y of the file (in file order) is image row... */
static inline uint32_t image_row(const struct bmp *m, uint32_t file_row)
{
	return m->top_down ? file_row : m->height - 1 - file_row;
}

static int bmp_raw(struct image_buf *b, const uint8_t *d, size_t len, size_t off, const struct bmp *m)
{
	uint64_t stride = (((uint64_t)m->width * m->bits + 31) >> 3) & ~(uint64_t)3;

	if (off > len || (len - off) / stride < m->height)
		return image_fail(b, -EBADMSG, "BMP: truncated (%llu bytes of pixels, %zu there)",
				  (unsigned long long)(stride * m->height), off > len ? 0 : len - off);
	for (uint32_t y = 0; y < m->height; y++)
		bmp_row(m, d + off + y * stride, m->width, b->pixels + (size_t)image_row(m, y) * m->width * 4);
	return 0;
}

/*
 * RLE4/RLE8 as Pillow's BmpRleDecoder: indices appended to one array in file
 * row order, runs clipped to the row, pixels skipped or never reached left
 * index 0; absolute runs are word aligned by the file offset.
 */
static int bmp_rle(struct image_buf *b, const uint8_t *d, size_t len, size_t off, const struct bmp *m)
{
	uint64_t dest = (uint64_t)m->width * m->height, n = 0;
	bool rle4 = m->compression == BMP_RLE4;
	uint8_t *idx;
	size_t pos = off;
	uint64_t x = 0;
	int r;

	r = image_scratch(b, (size_t)dest);
	if (r < 0)
		return r;
	idx = b->scratch;
	memset(idx, 0, (size_t)dest);
	while (n < dest) {
		unsigned count, byte;

		if (pos + 2 > len)
			break;
		count = d[pos];
		byte = d[pos + 1];
		pos += 2;
		if (count) {
			/* encoded: `count` pixels of one index (RLE4: two alternating) */
			uint64_t run = x + count > m->width ? (x < m->width ? m->width - x : 0) : count;

			for (uint64_t i = 0; i < run && n < dest; i++)
				idx[n++] = (uint8_t)(rle4 ? (i % 2 ? byte & 15 : byte >> 4) : byte);
			x += run;
		} else if (byte == 0) {
			/* end of line: zeros to the next row */
			n = (n + m->width - 1) / m->width * m->width;
			x = 0;
		} else if (byte == 1) {
			break;
		} else if (byte == 2) {
			uint64_t skip;

			if (pos + 2 > len)
				break;
			skip = d[pos] + (uint64_t)d[pos + 1] * m->width;
			pos += 2;
			n += skip < dest - n ? skip : dest - n;
			x = n % m->width;
		} else {
			/* absolute: `byte` literal indices */
			uint64_t want = byte < dest - n ? byte : dest - n;
			size_t bytes = (size_t)(rle4 ? (want + 1) / 2 : want), avail = len - pos;
			size_t got = bytes < avail ? bytes : avail;

			for (size_t i = 0; i < got; i++) {
				if (rle4) {
					idx[n++] = d[pos + i] >> 4;
					if (i * 2 + 1 < want)
						idx[n++] = d[pos + i] & 15;
				} else {
					idx[n++] = d[pos + i];
				}
			}
			pos += got;
			if (got < bytes || n == dest)
				break;
			x += byte;
			if (pos % 2)
				pos++;
		}
	}
	for (uint32_t y = 0; y < m->height; y++) {
		uint8_t *dst = b->pixels + (size_t)image_row(m, y) * m->width * 4;
		const uint8_t *src = idx + (size_t)y * m->width;

		for (uint32_t xx = 0; xx < m->width; xx++)
			put_index(m, src[xx], dst + (size_t)xx * 4);
	}
	return 0;
}

int bmp_decode(struct image_buf *b, const uint8_t *d, size_t len)
{
	struct bmp m = {0};
	size_t palette_at = 0, off;
	int r;

	if (len < 14 || d[0] != 'B' || d[1] != 'M')
		return image_fail(b, -EBADMSG, "Not a BMP file");
	r = bmp_header(b, d, len, &m, &palette_at);
	if (r < 0)
		return r;
	/* Before any pixel memory: the size the header claims. */
	r = image_alloc(b, m.width, m.height);
	if (r < 0)
		return r;
	r = bmp_layout(b, &m);
	if (r < 0)
		return r;
	off = image_le32(d + 10);
	if (m.bits <= 8) {
		r = bmp_palette(b, d, len, palette_at, &m);
		if (r < 0)
			return r;
		/* A pixel offset that forgot the palette: Pillow skips it. */
		if (off == palette_at)
			off += (size_t)(m.header == 12 ? 3 : 4) * m.colors;
		if (off == 0)
			off = palette_at + (size_t)(m.header == 12 ? 3 : 4) * m.colors;
	} else if (off == 0) {
		off = palette_at + (m.header == 40 && m.compression == BMP_BITFIELDS ? 12 : 0);
	}
	if (m.compression == BMP_RLE8 || m.compression == BMP_RLE4)
		return bmp_rle(b, d, len, off, &m);
	return bmp_raw(b, d, len, off, &m);
}
