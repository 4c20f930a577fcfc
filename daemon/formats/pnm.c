/* SPDX-License-Identifier: MIT */
/*
 * Netpbm P1-P6 (PBM, PGM, PPM; torchvision's ImageFolder lists .ppm and
 * .pgm), following Pillow's PpmImagePlugin: header tokens of at most 10
 * characters with '#' comments, maxval 1..65535, samples scaled by
 * round(v / maxval * 255) (half to even, as Python rounds; PGM over 255 to
 * Pillow's 16-bit "I" then clipped at 255), PBM's 1 black, and a file too
 * short for its pixels is an error.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "image.h"

#define PNM_MAX_TOKEN 10

struct cursor {
	const uint8_t *d;
	size_t len, pos;
};

/*
 * A header token, as Pillow's _read_token: whitespace skipped, '#' to the
 * end of the line skipped (even inside a token), the one whitespace byte
 * after the token consumed. Digits only, as a number.
 */
static int header_number(struct image_buf *b, struct cursor *c, uint32_t *out)
{
	char tok[PNM_MAX_TOKEN + 2];
	size_t n = 0;
	uint64_t v = 0;

	while (n <= PNM_MAX_TOKEN) {
		uint8_t ch;

		if (c->pos >= c->len)
			break;
		ch = c->d[c->pos++];
		if (image_pnm_space(ch)) {
			if (n == 0)
				continue;
			break;
		}
		if (ch == '#') {
			while (c->pos < c->len && c->d[c->pos] != '\r' && c->d[c->pos] != '\n')
				c->pos++;
			if (c->pos < c->len)
				c->pos++;
			continue;
		}
		tok[n++] = (char)ch;
	}
	if (n == 0)
		return image_fail(b, -EBADMSG, "PNM: reached the end of the file in its header");
	if (n > PNM_MAX_TOKEN)
		return image_fail(b, -EBADMSG, "PNM: token too long in its header");
	for (size_t i = 0; i < n; i++) {
		if (tok[i] < '0' || tok[i] > '9')
			return image_fail(b, -EBADMSG, "PNM: '%.*s' in its header is not a number", (int)n, tok);
		v = v * 10 + (uint64_t)(tok[i] - '0');
	}
	if (v > UINT32_MAX)
		return image_fail(b, -EBADMSG, "PNM: number too large in its header");
	*out = (uint32_t)v;
	return 0;
}

/* Pillow: min(out_max, round(v / maxval * out_max)), Python's round. */
static unsigned scale(unsigned v, unsigned maxval, unsigned out_max)
{
	double x = nearbyint((double)v / (double)maxval * (double)out_max);

	return x > out_max ? out_max : (unsigned)x;
}

/* One sample to 8 bits: a PGM over 255 becomes Pillow's "I" (16-bit scale), clipped at 255 by convert("RGB"). */
static uint8_t to8(unsigned v, unsigned maxval, bool wide_grey)
{
	unsigned s;

	if (maxval == 255)
		return (uint8_t)v;
	s = scale(v, maxval, wide_grey ? 65535 : 255);
	return (uint8_t)(s > 255 ? 255 : s);
}

/* P1: '0'/'1' characters, whitespace and comments between them optional. */
static int plain_bits(struct image_buf *b, struct cursor *c)
{
	size_t total = (size_t)b->width * b->height, n = 0;

	while (n < total && c->pos < c->len) {
		uint8_t ch = c->d[c->pos++];

		if (image_pnm_space(ch))
			continue;
		if (ch == '#') {
			while (c->pos < c->len && c->d[c->pos] != '\r' && c->d[c->pos] != '\n')
				c->pos++;
			c->pos++;
			continue;
		}
		if (ch != '0' && ch != '1')
			return image_fail(b, -EBADMSG, "PNM: invalid token for this mode: '%c'", ch);
		memset(b->pixels + n * 4, ch == '1' ? 0 : 255, 3);
		b->pixels[n * 4 + 3] = 255;
		n++;
	}
	return n == total ? 0 : image_fail(b, -EBADMSG, "PNM: not enough image data");
}

/* P2/P3: decimal samples; a comment joins the text around it, as Pillow's block filter does. */
static int plain_samples(struct image_buf *b, struct cursor *c, unsigned bands, unsigned maxval)
{
	size_t total = (size_t)b->width * b->height * bands, n = 0;
	bool wide = bands == 1 && maxval > 255;
	uint64_t v = 0;
	size_t digits = 0;

	/* the end of the file ends the last token, as whitespace would */
	for (size_t i = c->pos; i <= c->len; i++) {
		uint8_t ch = i < c->len ? c->d[i] : ' ';

		if (ch == '#') {
			while (i + 1 < c->len && c->d[i + 1] != '\r' && c->d[i + 1] != '\n')
				i++;
			i++; /* the line end goes with the comment */
			if (i < c->len)
				continue;
			ch = ' ';
		}
		if (!image_pnm_space(ch)) {
			if (ch < '0' || ch > '9')
				return image_fail(b, -EBADMSG, "PNM: '%c' in its samples", ch);
			if (++digits > PNM_MAX_TOKEN)
				return image_fail(b, -EBADMSG, "PNM: token too long in its samples");
			v = v * 10 + (uint64_t)(ch - '0');
			continue;
		}
		if (!digits)
			continue;
		if (v > maxval)
			return image_fail(b, -EBADMSG, "PNM: sample %llu over maxval %u", (unsigned long long)v,
					  maxval);
		b->pixels[n / bands * 4 + n % bands] = to8((unsigned)v, maxval, wide);
		if (++n == total)
			break;
		v = 0;
		digits = 0;
	}
	if (n < total)
		return image_fail(b, -EBADMSG, "PNM: not enough image data");
	for (size_t i = 0; i < (size_t)b->width * b->height; i++) {
		uint8_t *p = b->pixels + i * 4;

		if (bands == 1)
			p[1] = p[2] = p[0];
		p[3] = 255;
	}
	return 0;
}

int pnm_decode(struct image_buf *b, const uint8_t *data, size_t len)
{
	struct cursor c = {.d = data, .len = len, .pos = 3};
	uint32_t w, h, maxval = 1;
	unsigned kind, bands;
	size_t need, n;
	int r;

	if (len < 3 || data[0] != 'P' || data[1] < '1' || data[1] > '6' || !image_pnm_space(data[2]))
		return image_fail(b, -EBADMSG, "Not a PNM file");
	kind = (unsigned)(data[1] - '0');
	bands = kind == 3 || kind == 6 ? 3 : 1;
	r = header_number(b, &c, &w);
	if (r == 0)
		r = header_number(b, &c, &h);
	if (r < 0)
		return r;
	if (kind != 1 && kind != 4) {
		r = header_number(b, &c, &maxval);
		if (r < 0)
			return r;
		if (maxval == 0 || maxval > 65535)
			return image_fail(b, -EBADMSG, "PNM: maxval %u not in 1..65535", maxval);
	}
	/* Before any pixel memory: the size the header claims. */
	r = image_alloc(b, w, h);
	if (r < 0)
		return r;
	if (kind == 1)
		return plain_bits(b, &c);
	if (kind == 2 || kind == 3)
		return plain_samples(b, &c, bands, maxval);

	n = (size_t)w * h;
	if (kind == 4) {
		size_t row = ((size_t)w + 7) / 8;

		if ((len - c.pos) / row < h)
			return image_fail(b, -EBADMSG, "PNM: not enough image data");
		for (uint32_t y = 0; y < h; y++)
			for (uint32_t x = 0; x < w; x++) {
				uint8_t *p = b->pixels + ((size_t)y * w + x) * 4;
				bool black = (data[c.pos + y * row + x / 8] >> (7 - x % 8)) & 1;

				memset(p, black ? 0 : 255, 3);
				p[3] = 255;
			}
		return 0;
	}
	/* P5/P6: bytes, or big-endian 16-bit samples when maxval > 255 */
	need = n * bands * (maxval > 255 ? 2 : 1);
	if (len - c.pos < need)
		return image_fail(b, -EBADMSG, "PNM: not enough image data");
	for (size_t i = 0; i < n; i++) {
		uint8_t *p = b->pixels + i * 4;

		for (unsigned k = 0; k < bands; k++) {
			size_t at = c.pos + (i * bands + k) * (maxval > 255 ? 2 : 1);
			unsigned v = maxval > 255 ? (unsigned)data[at] << 8 | data[at + 1] : data[at];

			/* 65535 grey is Pillow's raw I;16B, clipped: the same as scaling by 1 */
			p[k] = to8(v, maxval, bands == 1 && maxval > 255);
		}
		if (bands == 1)
			p[1] = p[2] = p[0];
		p[3] = 255;
	}
	return 0;
}
