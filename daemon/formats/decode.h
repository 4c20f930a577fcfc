/* SPDX-License-Identifier: MIT */
/*
 * JPEG decoding with libjpeg(-turbo): the header first, then only a region
 * of the image, optionally downscaled in the DCT domain by 2, 4 or 8, as
 * 4-byte RGBX pixels (X = 255). Grayscale, YCbCr, RGB, CMYK and YCCK
 * files all come out RGB; CMYK the way Pillow converts it.
 *
 * One `struct decoder` per thread: it owns the libjpeg decompressor and the
 * pixel buffer, both reused from image to image. Not thread safe.
 */
#ifndef STOKER_DECODE_H
#define STOKER_DECODE_H

#include <stddef.h>
#include <stdint.h>

/* Limits when the caller passes 0: Pillow's decompression-bomb size, libjpeg-turbo's advice on scans. */
#define DECODE_DEFAULT_MAX_PIXELS UINT64_C(89478485)
#define DECODE_DEFAULT_MAX_SCANS 500u

struct decoder;

/* Pixels (x0, y0) onwards of a decoded region; valid until the decoder's next use. */
struct decoded_region {
	const uint8_t *pixels; /* RGBX */
	size_t stride;         /* bytes a row */
	uint32_t width, height;
};

/*
 * Files over max_pixels (width * height) fail before any pixel is decoded,
 * progressive files with more than max_scans scans as soon as one more is
 * seen; 0 for either means its default above.
 */
int decoder_new(uint64_t max_pixels, uint32_t max_scans, struct decoder **out);
void decoder_free(struct decoder *d);

/*
 * Start on the JPEG in `jpeg` (len bytes, which must stay valid until
 * decoder_finish()): read its header and return the image's size.
 * -EBADMSG: not a JPEG this decoder can read (corrupt, truncated, empty,
 * 12-bit, lossless, unknown colour space); -E2BIG: over max_pixels.
 */
int decoder_open(struct decoder *d, const uint8_t *jpeg, size_t len, uint32_t *width, uint32_t *height);

/* The size of the open image decoded at 1/denom (denom 1, 2, 4 or 8). */
void decoder_scaled_size(const struct decoder *d, unsigned denom, uint32_t *width, uint32_t *height);

/*
 * Decode columns [x0, x1) and rows [y0, y1) of the open image at 1/denom
 * (coordinates in the scaled image), reading and converting no more of it
 * than libjpeg needs for them. Once per decoder_open().
 * -EINVAL: bad region or scale; -EBADMSG: corrupt data, truncated, too many
 * scans; -ENOMEM.
 */
int decoder_read(struct decoder *d, unsigned denom, uint32_t x0, uint32_t y0, uint32_t x1, uint32_t y1,
		 struct decoded_region *out);

/* Done with the open image (or after any error): ready for decoder_open() again. */
void decoder_finish(struct decoder *d);

/* The last error's reason: libjpeg's message, or ours. */
const char *decoder_error(const struct decoder *d);

#endif
