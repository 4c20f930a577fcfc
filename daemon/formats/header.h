/* SPDX-License-Identifier: MIT */
/*
 * Image headers without decoding: the format (image_sniff(), the one
 * dispatch by content), the stored size, and the EXIF orientation, read
 * from a file through a small window (a few reads, never the whole file)
 * or from bytes in memory.
 *
 * Orientation is what Ultralytics' training sees: cv2.imdecode applies the
 * EXIF Orientation tag (1..8) of JPEG (the first APP1 "Exif" segment), PNG
 * (the first eXIf chunk, wherever it is) and WebP (an EXIF chunk, when
 * VP8X flags one), exactly as Pillow's ImageOps.exif_transpose, reading
 * the tag's first two value bytes whatever its type and count; Ultralytics' imread reads .tif files with
 * IMREAD_UNCHANGED, which ignores it, so a TIFF's tag is not applied (1).
 * BMP and PNM have none. Classification (torchvision's PIL loader) applies
 * no orientation at all: only detection asks for it.
 *
 * Hostile input: every offset is bounds-checked against the file or the
 * segment that holds it, loops are bounded (markers, chunks, IFD entries),
 * and an unreadable or absurd orientation counts as 1 (none).
 */
#ifndef STOKER_HEADER_H
#define STOKER_HEADER_H

#include <stddef.h>
#include <stdint.h>

#include "decode.h"
#include "image.h"

/* A file's bytes seen through a window that moves as a header walk asks;
 * or bytes in memory (mem != NULL). */
struct header_window {
	int fd;
	const uint8_t *mem;
	size_t mem_len;
	uint8_t buf[4096];
	uint64_t at; /* file offset of buf[0] */
	size_t len;  /* bytes of it read */
};

struct image_header {
	enum image_format format;
	uint32_t width, height; /* as stored, before the orientation */
	uint8_t orientation;    /* EXIF 1..8 as applied for detection; 1: none */
};

/* The header of the file or bytes seen through w. -EBADMSG: no known
 * format, or no size found in a bounded walk; fields written on success
 * only. */
int image_header_read(struct header_window *w, struct image_header *out);
int image_header_fd(int fd, struct image_header *out);
int image_header_mem(const uint8_t *data, size_t len, struct image_header *out);

/* Orientations 5..8 swap width and height. */
static inline int orientation_swaps(unsigned o)
{
	return o >= 5 && o <= 8;
}

/* The size after orientation. */
static inline void image_header_oriented(const struct image_header *h, uint32_t *width, uint32_t *height)
{
	int swap = orientation_swaps(h->orientation);

	*width = swap ? h->height : h->width;
	*height = swap ? h->width : h->height;
}

/*
 * Apply EXIF orientation o (2..8) to the RGBX pixels of `in`, as
 * exif_transpose / cv2 do, into *buf (grown as needed, *cap its size):
 * *out describes the result. o == 1 (or any other value) copies nothing
 * and gives *out = *in. -ENOMEM.
 */
int image_orient(const struct decoded_region *in, unsigned o, uint8_t **buf, size_t *cap, struct decoded_region *out);

#endif
