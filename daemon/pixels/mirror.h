/* SPDX-License-Identifier: MIT */
/* In-place mirrors of a packed RGB image (rows of w * 3 bytes). */
#ifndef STOKER_MIRROR_H
#define STOKER_MIRROR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Upside down: rows swapped a block at a time. */
static inline void mirror_rows(uint8_t *px, uint32_t w, uint32_t h)
{
	uint8_t tmp[4096];
	size_t row = (size_t)w * 3;

	for (uint32_t y = 0; y < h / 2; y++) {
		uint8_t *a = px + y * row, *b = px + (size_t)(h - 1 - y) * row;

		for (size_t i = 0; i < row; i += sizeof(tmp)) {
			size_t n = row - i < sizeof(tmp) ? row - i : sizeof(tmp);

			memcpy(tmp, a + i, n);
			memcpy(a + i, b + i, n);
			memcpy(b + i, tmp, n);
		}
	}
}

/* Left to right: pixels swapped within each row. */
static inline void mirror_columns(uint8_t *px, uint32_t w, uint32_t h)
{
	for (uint32_t y = 0; y < h; y++) {
		uint8_t *row = px + (size_t)y * w * 3;

		for (uint32_t x = 0; x < w / 2; x++) {
			uint8_t t[3], *l = row + (size_t)x * 3, *r = row + (size_t)(w - 1 - x) * 3;

			memcpy(t, l, 3);
			memcpy(l, r, 3);
			memcpy(r, t, 3);
		}
	}
}

#endif
