/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "image.h"

enum image_format image_sniff(const uint8_t *p, size_t n)
{
	if (n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF)
		return IMAGE_JPEG; /* MPO files are JPEGs too: their first image is the picture */
	if (n >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8))
		return IMAGE_PNG;
	if (n >= 12 && !memcmp(p, "RIFF", 4) && !memcmp(p + 8, "WEBP", 4))
		return IMAGE_WEBP;
	/* classic and BigTIFF, either byte order */
	if (n >= 4 &&
	    (!memcmp(p, "II*\0", 4) || !memcmp(p, "MM\0*", 4) || !memcmp(p, "II+\0", 4) || !memcmp(p, "MM\0+", 4)))
		return IMAGE_TIFF;
	if (n >= 2 && p[0] == 'B' && p[1] == 'M')
		return IMAGE_BMP;
	if (n >= 3 && p[0] == 'P' && p[1] >= '1' && p[1] <= '6' && image_pnm_space(p[2]))
		return IMAGE_PNM;
	return IMAGE_UNKNOWN;
}

/* Each format's name and whole-image decoder (JPEG's is decode.h's, crop-aware). */
static const struct {
	const char *name;
	int (*decode)(struct image_buf *b, const uint8_t *data, size_t len);
} formats[] = {
	[IMAGE_UNKNOWN] = {"unknown", NULL},   [IMAGE_JPEG] = {"JPEG", NULL},     [IMAGE_PNG] = {"PNG", png_decode},
	[IMAGE_WEBP] = {"WebP", webp_decode},  [IMAGE_BMP] = {"BMP", bmp_decode}, [IMAGE_TIFF] = {"TIFF", tiff_decode},
	[IMAGE_PNM] = {"PPM/PGM", pnm_decode},
};

const char *image_format_name(enum image_format f)
{
	return (size_t)f < sizeof(formats) / sizeof(formats[0]) ? formats[f].name : "unknown";
}

void image_buf_release(struct image_buf *b)
{
	if (!b)
		return;
	free(b->pixels);
	free(b->scratch);
	b->pixels = b->scratch = NULL;
	b->cap = b->scratch_cap = 0;
}

int image_fail(struct image_buf *b, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(b->error, sizeof(b->error), fmt, ap);
	va_end(ap);
	return code;
}

int image_alloc(struct image_buf *b, uint32_t width, uint32_t height)
{
	uint64_t max = b->max_pixels ? b->max_pixels : DECODE_DEFAULT_MAX_PIXELS;

	if (width == 0 || height == 0)
		return image_fail(b, -EBADMSG, "Image of %ux%u pixels", width, height);
	if ((uint64_t)width * height > max)
		return image_fail(b, -E2BIG, "Image of %ux%u pixels over the limit of %llu", width, height,
				  (unsigned long long)max);
	if (grow((void **)&b->pixels, &b->cap, (size_t)width * height * 4, 1) < 0)
		return image_fail(b, -ENOMEM, "Out of memory for %ux%u pixels", width, height);
	b->width = width;
	b->height = height;
	return 0;
}

int image_scratch(struct image_buf *b, size_t bytes)
{
	if (grow((void **)&b->scratch, &b->scratch_cap, bytes, 1) < 0)
		return image_fail(b, -ENOMEM, "Out of memory for %zu bytes of decoder rows", bytes);
	return 0;
}

int image_decode(struct image_buf *b, enum image_format f, const uint8_t *data, size_t len, struct decoded_region *out)
{
	int r;

	if (!b || !out || (!data && len))
		return -EINVAL;
	b->error[0] = '\0';
	b->width = b->height = 0;
	if (len == 0)
		return image_fail(b, -EBADMSG, "Empty input file");
	if ((size_t)f >= sizeof(formats) / sizeof(formats[0]) || !formats[f].decode)
		return image_fail(b, -EINVAL, "No whole-image decoder for %s", image_format_name(f));
	r = formats[f].decode(b, data, len);
	if (r < 0)
		return r;
	*out = (struct decoded_region){
		.pixels = b->pixels,
		.stride = (size_t)b->width * 4,
		.width = b->width,
		.height = b->height,
	};
	return 0;
}
