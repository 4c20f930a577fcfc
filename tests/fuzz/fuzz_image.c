/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: one file's bytes straight into one whole-image decoder
 * (daemon/formats/image.h), the format fixed at build time (-DFUZZ_FORMAT="png",
 * "webp", "tiff", "bmp" or "pnm": fuzz_png, fuzz_webp, ...), so inputs whose
 * magic bytes the fuzzer has mangled still reach that decoder. What a
 * decode returns is read whole, so a pixel left unwritten or written out of
 * bounds shows under the sanitizers. The pixel cap is lowered so that one
 * input cannot allocate much; one image_buf is reused across inputs, as a
 * worker reuses its own.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifndef FUZZ_FORMAT
#error "build with -DFUZZ_FORMAT=\"png\" (or webp, tiff, bmp, pnm)"
#endif

static enum image_format fuzz_format(void)
{
	static const struct {
		const char *name;
		enum image_format f;
	} formats[] = {{"png", IMAGE_PNG},
		       {"webp", IMAGE_WEBP},
		       {"tiff", IMAGE_TIFF},
		       {"bmp", IMAGE_BMP},
		       {"pnm", IMAGE_PNM}};

	for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
		if (!strcmp(formats[i].name, FUZZ_FORMAT))
			return formats[i].f;
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct image_buf b = {.max_pixels = 1u << 20};
	static enum image_format f;
	struct decoded_region reg;
	volatile uint32_t sum = 0;

	if (!f)
		f = fuzz_format();
	if (image_decode(&b, f, data, size, &reg) < 0) {
		if (!b.error[0])
			abort(); /* every failure says why */
		return 0;
	}
	if (reg.width == 0 || reg.height == 0 || (uint64_t)reg.width * reg.height > b.max_pixels)
		abort();
	for (uint32_t y = 0; y < reg.height; y++) {
		const uint8_t *row = reg.pixels + y * reg.stride;

		for (uint32_t x = 0; x < reg.width; x++) {
			if (row[x * 4 + 3] != 255)
				abort(); /* RGBX: X is 255 */
			sum += row[x * 4] + row[x * 4 + 1] + row[x * 4 + 2];
		}
	}
	(void)sum;
	return 0;
}
