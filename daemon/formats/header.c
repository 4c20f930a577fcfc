/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "grow.h"
#include "header.h"

/* Bytes [off, off + n) (n <= sizeof(buf)); NULL past the end or on error. */
static const uint8_t *window_at(struct header_window *w, uint64_t off, size_t n)
{
	ssize_t got;

	if (w->mem)
		return off <= w->mem_len && n <= w->mem_len - off ? w->mem + off : NULL;
	if (off >= w->at && off - w->at <= w->len && n <= w->len - (off - w->at))
		return w->buf + (off - w->at);
	if (off > INT64_MAX)
		return NULL;
	do
		got = pread(w->fd, w->buf, sizeof(w->buf), (off_t)off);
	while (got < 0 && errno == EINTR);
	if (got < 0) {
		w->len = 0;
		return NULL;
	}
	w->at = off;
	w->len = (size_t)got;
	return (size_t)got >= n ? w->buf : NULL;
}

/* Bounds of the walks: markers or chunks looked at, how far into a file a
 * size is looked for, IFD entries read. */
#define HEADER_MAX_MARKERS 256
#define HEADER_MAX_OFFSET (16u << 20)
#define HEADER_MAX_CHUNKS 256
#define HEADER_MAX_PNG_CHUNKS 65536 /* eXIf may follow all IDAT chunks */
#define HEADER_MAX_IFD_ENTRIES 1024
#define HEADER_MAX_PNM_BYTES 4096

static uint32_t be16(const uint8_t *p)
{
	return (uint32_t)p[0] << 8 | p[1];
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint32_t le24(const uint8_t *p)
{
	return (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

static uint64_t u16_of(const uint8_t *p, bool big)
{
	return big ? be16(p) : image_le16(p);
}

static uint64_t u32_of(const uint8_t *p, bool big)
{
	return big ? be32(p) : image_le32(p);
}

static uint64_t u64_of(const uint8_t *p, bool big)
{
	return big ? (u32_of(p, true) << 32 | u32_of(p + 4, true)) : (u32_of(p + 4, false) << 32 | u32_of(p, false));
}

/* What IFD0 of a TIFF structure says (0: absent). */
struct ifd0 {
	uint64_t width, height;
	unsigned orientation;
};

/*
 * IFD0 of the TIFF structure at `base` (a TIFF file, or the payload of an
 * EXIF segment), every offset relative to base and below `limit` (the
 * structure's size). Only SHORT and LONG (and BigTIFF's LONG8) values
 * held in the entry itself are read: all the size tags need.
 */
static int read_ifd0(struct header_window *w, uint64_t base, uint64_t limit, struct ifd0 *out)
{
	const uint8_t *p = window_at(w, base, 16);
	uint64_t ifd, count, entry_size, count_size;
	bool big, wide;

	*out = (struct ifd0){0};
	if (!p || limit < 8)
		return -EBADMSG;
	if (p[0] == 'I' && p[1] == 'I')
		big = false;
	else if (p[0] == 'M' && p[1] == 'M')
		big = true;
	else
		return -EBADMSG;
	if (u16_of(p + 2, big) == 42) {
		wide = false;
		ifd = u32_of(p + 4, big);
	} else if (u16_of(p + 2, big) == 43 && limit >= 16 && u16_of(p + 4, big) == 8) {
		wide = true; /* BigTIFF */
		ifd = u64_of(p + 8, big);
	} else {
		return -EBADMSG;
	}
	count_size = wide ? 8 : 2;
	entry_size = wide ? 20 : 12;
	if (ifd < 8 || ifd > limit || count_size > limit - ifd)
		return -EBADMSG;
	p = window_at(w, base + ifd, 8);
	if (!p)
		return -EBADMSG;
	count = wide ? u64_of(p, big) : u16_of(p, big);
	if (count > HEADER_MAX_IFD_ENTRIES)
		count = HEADER_MAX_IFD_ENTRIES;
	for (uint64_t i = 0; i < count; i++) {
		uint64_t at = ifd + count_size + i * entry_size, n, v;
		unsigned tag, type;

		if (at > limit || entry_size > limit - at)
			break;
		p = window_at(w, base + at, 20);
		if (!p && !(p = window_at(w, base + at, 12)))
			break;
		tag = (unsigned)u16_of(p, big);
		type = (unsigned)u16_of(p + 2, big);
		n = wide ? u64_of(p + 4, big) : u32_of(p + 4, big);
		/* OpenCV's ExifReader reads the orientation as the entry's first
		 * two value bytes whatever its type and count say: so do we. */
		if (tag == 0x0112 && !wide && !out->orientation) {
			v = u16_of(p + 8, big);
			out->orientation = v >= 1 && v <= 8 ? (unsigned)v : 0;
			continue;
		}
		if (n < 1)
			continue;
		if (type == 3) /* SHORT: the first value is the first two bytes */
			v = u16_of(p + (wide ? 12 : 8), big);
		else if (type == 4 && n == 1) /* LONG */
			v = u32_of(p + (wide ? 12 : 8), big);
		else if (type == 16 && wide && n == 1) /* LONG8 */
			v = u64_of(p + 12, big);
		else
			continue;
		if (tag == 256)
			out->width = v;
		else if (tag == 257)
			out->height = v;
	}
	return 0;
}

/* The orientation in the TIFF structure of an EXIF payload at [off, off +
 * len); 1 when there is none. (PNG's and WebP's payloads start with the
 * TIFF header: cv2 applies none behind an "Exif\0\0" there.) */
static unsigned exif_orientation(struct header_window *w, uint64_t off, uint64_t len)
{
	struct ifd0 ifd;

	if (read_ifd0(w, off, len, &ifd) < 0 || !ifd.orientation)
		return 1;
	return ifd.orientation;
}

static int set_size(struct image_header *h, uint64_t width, uint64_t height)
{
	if (!width || !height || width > INT32_MAX || height > INT32_MAX)
		return -EBADMSG;
	h->width = (uint32_t)width;
	h->height = (uint32_t)height;
	return 0;
}

/* The first SOFn marker's size, and the first Exif APP1 segment's orientation. */
static int jpeg_header(struct header_window *w, struct image_header *h)
{
	uint64_t off = 2;
	bool exif_seen = false;

	for (int k = 0; k < HEADER_MAX_MARKERS && off < HEADER_MAX_OFFSET; k++) {
		const uint8_t *p = window_at(w, off, 4);
		uint32_t len;
		uint8_t m;

		if (!p || p[0] != 0xFF)
			return -EBADMSG;
		m = p[1];
		if (m == 0xFF) { /* fill byte */
			off++;
			continue;
		}
		if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) { /* no length */
			off += 2;
			continue;
		}
		if (m == 0xDA || m == 0xD9) /* scan data or the end before any frame */
			return -EBADMSG;
		len = be16(p + 2);
		if (len < 2)
			return -EBADMSG;
		if (m == 0xE1 && !exif_seen && len >= 2 + 6 + 8) {
			p = window_at(w, off + 4, 6);
			if (p && !memcmp(p, "Exif\0\0", 6)) {
				exif_seen = true;
				h->orientation = (uint8_t)exif_orientation(w, off + 10, len - 8);
			}
		}
		/* SOF0..SOF15 but DHT (C4), JPG (C8) and DAC (CC) */
		if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
			p = window_at(w, off, 9);
			return p ? set_size(h, be16(p + 7), be16(p + 5)) : -EBADMSG;
		}
		off += 2 + len;
	}
	return -EBADMSG;
}

/* IHDR's size; the first eXIf chunk (before or after IDAT: cv2 reads
 * either) for the orientation. */
static int png_header(struct header_window *w, struct image_header *h)
{
	const uint8_t *p = window_at(w, 8, 16);
	uint64_t off = 8;
	int r;

	if (!p || memcmp(p + 4, "IHDR", 4))
		return -EBADMSG;
	r = set_size(h, be32(p + 8), be32(p + 12));
	if (r < 0)
		return r;
	for (int k = 0; k < HEADER_MAX_PNG_CHUNKS; k++) {
		uint32_t len;

		p = window_at(w, off, 8);
		if (!p)
			break;
		len = be32(p);
		if (len > INT32_MAX || !memcmp(p + 4, "IEND", 4))
			break;
		if (!memcmp(p + 4, "eXIf", 4)) {
			h->orientation = (uint8_t)exif_orientation(w, off + 8, len);
			break;
		}
		off += 12 + (uint64_t)len; /* length, type, data, CRC */
	}
	return 0;
}

/* The first chunk's size (VP8X: the canvas), an EXIF chunk's orientation. */
static int webp_header(struct header_window *w, struct image_header *h)
{
	const uint8_t *p = window_at(w, 4, 4);
	uint64_t off = 12, end;
	int r;

	if (!p)
		return -EBADMSG;
	end = 8 + (uint64_t)image_le32(p); /* the RIFF chunk's end */
	p = window_at(w, 12, 18);          /* the first chunk's header and 10 bytes of it */
	if (!p)
		return -EBADMSG;
	if (!memcmp(p, "VP8 ", 4)) {
		if (p[11] != 0x9d || p[12] != 0x01 || p[13] != 0x2a)
			return -EBADMSG;
		return set_size(h, image_le16(p + 14) & 0x3fff, image_le16(p + 16) & 0x3fff);
	}
	if (!memcmp(p, "VP8L", 4)) {
		uint32_t bits = image_le32(p + 9);

		if (p[8] != 0x2f)
			return -EBADMSG;
		return set_size(h, (bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1);
	}
	if (memcmp(p, "VP8X", 4))
		return -EBADMSG;
	r = set_size(h, (uint64_t)le24(p + 12) + 1, (uint64_t)le24(p + 15) + 1);
	if (r < 0 || !(p[8] & 0x08)) /* no EXIF flag: no orientation */
		return r;
	for (int k = 0; k < HEADER_MAX_CHUNKS && off + 8 <= end; k++) {
		uint32_t len;

		p = window_at(w, off, 8);
		if (!p)
			break;
		len = image_le32(p + 4);
		if (!memcmp(p, "EXIF", 4)) {
			h->orientation = (uint8_t)exif_orientation(w, off + 8, len);
			break;
		}
		off += 8 + (uint64_t)len + (len & 1);
	}
	return 0;
}

/* BITMAPCOREHEADER (12 bytes) or any later info header: width, |height|. */
static int bmp_header(struct header_window *w, struct image_header *h)
{
	const uint8_t *p = window_at(w, 14, 12);
	int32_t height;

	if (!p)
		return -EBADMSG;
	if (image_le32(p) == 12)
		return set_size(h, image_le16(p + 4), image_le16(p + 6));
	if (image_le32(p) < 16)
		return -EBADMSG;
	height = (int32_t)image_le32(p + 8);
	if ((int32_t)image_le32(p + 4) <= 0 || height == INT32_MIN)
		return -EBADMSG;
	return set_size(h, image_le32(p + 4), height < 0 ? (uint64_t) - (int64_t)height : (uint64_t)height);
}

/* "Pn", then width and height as decimal numbers between blanks and
 * #-comments. */
static int pnm_header(struct header_window *w, struct image_header *h)
{
	uint64_t off = 2, v[2] = {0, 0};

	for (int i = 0; i < 2; i++) {
		const uint8_t *p;
		int digits = 0;

		while ((p = window_at(w, off, 1)) && off < HEADER_MAX_PNM_BYTES) {
			if (*p == '#') {
				while ((p = window_at(w, off, 1)) && *p != '\n' && *p != '\r' &&
				       off < HEADER_MAX_PNM_BYTES)
					off++;
			} else if (image_pnm_space(*p)) {
				off++;
			} else {
				break;
			}
		}
		while ((p = window_at(w, off, 1)) && *p >= '0' && *p <= '9' && digits < 10) {
			v[i] = v[i] * 10 + (uint64_t)(*p - '0');
			digits++;
			off++;
		}
		if (!digits)
			return -EBADMSG;
	}
	return set_size(h, v[0], v[1]);
}

/* ImageWidth and ImageLength of IFD0; the orientation tag is not applied
 * (see header.h). */
static int tiff_header(struct header_window *w, struct image_header *h)
{
	struct ifd0 ifd;
	int r = read_ifd0(w, 0, UINT64_MAX / 2, &ifd);

	return r < 0 ? r : set_size(h, ifd.width, ifd.height);
}

int image_header_read(struct header_window *w, struct image_header *out)
{
	struct image_header h = {.orientation = 1};
	const uint8_t *p;
	size_t n = 16;
	int r;

	/* image_sniff() needs at most 12 bytes; a shorter file is sniffed whole. */
	while (!(p = window_at(w, 0, n)) && n > 1)
		n /= 2;
	if (!p)
		return -EBADMSG;
	h.format = image_sniff(p, n);
	switch (h.format) {
	case IMAGE_JPEG: r = jpeg_header(w, &h); break;
	case IMAGE_PNG: r = png_header(w, &h); break;
	case IMAGE_WEBP: r = webp_header(w, &h); break;
	case IMAGE_BMP: r = bmp_header(w, &h); break;
	case IMAGE_TIFF: r = tiff_header(w, &h); break;
	case IMAGE_PNM: r = pnm_header(w, &h); break;
	default: r = -EBADMSG;
	}
	if (r == 0)
		*out = h;
	return r;
}

int image_header_fd(int fd, struct image_header *out)
{
	struct header_window w = {.fd = fd};

	return image_header_read(&w, out);
}

int image_header_mem(const uint8_t *data, size_t len, struct image_header *out)
{
	struct header_window w = {.fd = -1, .mem = data ? data : (const uint8_t *)"", .mem_len = data ? len : 0};

	return image_header_read(&w, out);
}

int image_orient(const struct decoded_region *in, unsigned o, uint8_t **buf, size_t *cap, struct decoded_region *out)
{
	/* Output pixel (x, y) comes from source (sx, sy): transposed
	 * orientations read sx from y and sy from x; flips mirror them. */
	static const struct {
		bool transpose, flip_x, flip_y;
	} op[9] = {
		[2] = {false, true, false}, /* mirror left-right */
		[3] = {false, true, true},  /* rotate 180 */
		[4] = {false, false, true}, /* mirror top-bottom */
		[5] = {true, false, false}, /* transpose */
		[6] = {true, false, true},  /* rotate 90 clockwise */
		[7] = {true, true, true},   /* transverse */
		[8] = {true, true, false},  /* rotate 90 counter-clockwise */
	};
	uint32_t ow, oh;
	size_t row;

	if (o < 2 || o > 8) {
		*out = *in;
		return 0;
	}
	ow = op[o].transpose ? in->height : in->width;
	oh = op[o].transpose ? in->width : in->height;
	row = (size_t)ow * 4;
	if (grow((void **)buf, cap, row * oh, 1) < 0)
		return -ENOMEM;
	for (uint32_t y = 0; y < oh; y++) {
		uint8_t *dst = *buf + y * row;

		for (uint32_t x = 0; x < ow; x++) {
			uint32_t sx = op[o].transpose ? y : x, sy = op[o].transpose ? x : y;

			if (op[o].flip_x)
				sx = in->width - 1 - sx;
			if (op[o].flip_y)
				sy = in->height - 1 - sy;
			memcpy(dst + (size_t)x * 4, in->pixels + (size_t)sy * in->stride + (size_t)sx * 4, 4);
		}
	}
	*out = (struct decoded_region){.pixels = *buf, .stride = row, .width = ow, .height = oh};
	return 0;
}
