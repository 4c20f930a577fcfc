/* SPDX-License-Identifier: MIT */
/*
 * WebP with libwebp: lossy and lossless, with or without alpha, decoded as
 * non-premultiplied RGBA (what Pillow asks libwebp for) with alpha then
 * discarded. An animated file gives its first frame as libwebp's animation
 * decoder composes it, which is how Pillow opens one.
 */
#include <errno.h>
#include <string.h>

#include <webp/decode.h>
#include <webp/demux.h>

#include "image.h"

static const char *status_text(VP8StatusCode s)
{
	switch (s) {
	case VP8_STATUS_OK: return "ok";
	case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
	case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
	case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
	case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
	case VP8_STATUS_SUSPENDED: return "suspended";
	case VP8_STATUS_USER_ABORT: return "aborted";
	case VP8_STATUS_NOT_ENOUGH_DATA: return "truncated (not enough data)";
	}
	return "unknown error";
}

static void opaque(struct image_buf *b)
{
	size_t n = (size_t)b->width * b->height;

	for (size_t i = 0; i < n; i++)
		b->pixels[i * 4 + 3] = 255;
}

/* The first frame of an animation, composed on its canvas. */
static int first_frame(struct image_buf *b, const uint8_t *data, size_t len)
{
	WebPData wd = {.bytes = data, .size = len};
	WebPAnimDecoderOptions opt;
	WebPAnimDecoder *dec;
	WebPAnimInfo info;
	uint8_t *frame;
	int ts, r;

	if (!WebPAnimDecoderOptionsInit(&opt))
		return image_fail(b, -EBADMSG, "WebP: libwebp version mismatch");
	opt.color_mode = MODE_RGBA;
	opt.use_threads = 0;
	dec = WebPAnimDecoderNew(&wd, &opt);
	if (!dec)
		return image_fail(b, -EBADMSG, "WebP: cannot parse the animation");
	if (!WebPAnimDecoderGetInfo(dec, &info) || info.canvas_width != b->width || info.canvas_height != b->height) {
		r = image_fail(b, -EBADMSG, "WebP: animation canvas differs from its header");
		goto out;
	}
	if (!WebPAnimDecoderGetNext(dec, &frame, &ts)) {
		r = image_fail(b, -EBADMSG, "WebP: cannot decode the first frame");
		goto out;
	}
	memcpy(b->pixels, frame, (size_t)b->width * b->height * 4);
	r = 0;
out:
	WebPAnimDecoderDelete(dec);
	return r;
}

int webp_decode(struct image_buf *b, const uint8_t *data, size_t len)
{
	WebPDecoderConfig config;
	VP8StatusCode s;
	int r;

	if (!WebPInitDecoderConfig(&config))
		return image_fail(b, -EBADMSG, "WebP: libwebp version mismatch");
	s = WebPGetFeatures(data, len, &config.input);
	if (s != VP8_STATUS_OK)
		return image_fail(b, -EBADMSG, "WebP: %s", status_text(s));
	/* Before any pixel memory: the size the header claims. */
	r = image_alloc(b, (uint32_t)config.input.width, (uint32_t)config.input.height);
	if (r < 0)
		return r;
	if (config.input.has_animation) {
		r = first_frame(b, data, len);
	} else {
		config.output.colorspace = MODE_RGBA;
		config.output.is_external_memory = 1;
		config.output.u.RGBA.rgba = b->pixels;
		config.output.u.RGBA.stride = (int)b->width * 4;
		config.output.u.RGBA.size = (size_t)b->width * b->height * 4;
		s = WebPDecode(data, len, &config);
		WebPFreeDecBuffer(&config.output);
		r = s == VP8_STATUS_OK ? 0
				       : image_fail(b, s == VP8_STATUS_OUT_OF_MEMORY ? -ENOMEM : -EBADMSG, "WebP: %s",
						    status_text(s));
	}
	if (r == 0)
		opaque(b);
	return r;
}
