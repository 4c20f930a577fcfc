/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "grow.h"
#include "decode.h"
#include "image.h"

enum decoder_state {
	DECODER_IDLE,
	DECODER_OPEN, /* header read */
	DECODER_READ, /* decompression started: only decoder_finish() now */
};

struct decoder {
	struct jpeg_decompress_struct cinfo;
	struct jpeg_error_mgr jerr;
	struct jpeg_progress_mgr progress;
	jmp_buf env; /* where libjpeg's errors land; set by every function that calls into it */
	int code;    /* what that landing returns */
	enum decoder_state state;
	bool cmyk; /* libjpeg writes CMYK, which we convert */
	uint64_t max_pixels;
	uint32_t max_scans;
	uint8_t *buf; /* decoded rows */
	size_t buf_cap;
	JSAMPROW *rows;
	size_t rows_cap;
	char error[JMSG_LENGTH_MAX + 64];
};

static _Noreturn void fail(j_common_ptr cinfo, int code)
{
	struct decoder *d = cinfo->client_data;

	(*cinfo->err->format_message)(cinfo, d->error);
	d->code = code;
	longjmp(d->env, 1);
}

static void error_exit(j_common_ptr cinfo)
{
	fail(cinfo, cinfo->err->msg_code == JERR_OUT_OF_MEMORY ? -ENOMEM : -EBADMSG);
}

static void emit_message(j_common_ptr cinfo, int msg_level)
{
	if (msg_level >= 0)
		return; /* trace */
	/* A truncated file gets gray rows where its data ran out: an error for us, corrupt data only a warning. */
	if (cinfo->err->msg_code == JWRN_JPEG_EOF)
		fail(cinfo, -EBADMSG);
	cinfo->err->num_warnings++;
}

static void output_message(j_common_ptr cinfo)
{
	(void)cinfo; /* never print: errors go to decoder_error() */
}

/* libjpeg-turbo's advice against hostile progressive files: bound the scans. */
static void progress_monitor(j_common_ptr cinfo)
{
	struct decoder *d = cinfo->client_data;

	if (cinfo->is_decompressor && ((j_decompress_ptr)cinfo)->input_scan_number > (int)d->max_scans) {
		snprintf(d->error, sizeof(d->error), "More than %u scans", d->max_scans);
		d->code = -EBADMSG;
		longjmp(d->env, 1);
	}
}

static int set_error(struct decoder *d, int code, const char *msg)
{
	snprintf(d->error, sizeof(d->error), "%s", msg);
	return code;
}

int decoder_new(uint64_t max_pixels, uint32_t max_scans, struct decoder **out)
{
	struct decoder *d;
	int r;

	if (!out)
		return -EINVAL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->max_pixels = max_pixels ? max_pixels : DECODE_DEFAULT_MAX_PIXELS;
	d->max_scans = max_scans ? max_scans : DECODE_DEFAULT_MAX_SCANS;

	d->cinfo.err = jpeg_std_error(&d->jerr);
	d->jerr.error_exit = error_exit;
	d->jerr.emit_message = emit_message;
	d->jerr.output_message = output_message;
	d->cinfo.client_data = d; /* jpeg_create_decompress keeps err and client_data */
	if (setjmp(d->env)) {
		r = d->code;
		jpeg_destroy_decompress(&d->cinfo);
		free(d);
		return r;
	}
	jpeg_create_decompress(&d->cinfo);
	d->progress.progress_monitor = progress_monitor;
	d->cinfo.progress = &d->progress;
	*out = d;
	return 0;
}

void decoder_free(struct decoder *d)
{
	if (!d)
		return;
	jpeg_destroy_decompress(&d->cinfo);
	free(d->buf);
	free(d->rows);
	free(d);
}

const char *decoder_error(const struct decoder *d)
{
	return d ? d->error : "";
}

/*
 * Whether the data after the first SOS holds an EOI marker. Entropy-coded
 * data never holds FF D9, so this tells a complete file from a truncated one
 * without decoding rows the crop does not need.
 */
static bool has_eoi(const uint8_t *p, size_t n)
{
	size_t m;

	if (n < 2)
		return false;
	/* Search from the end: EOI is normally the last thing in the file. */
	for (m = n - 1; m > 0;) {
		const uint8_t *ff = memrchr(p, 0xFF, m);

		if (!ff)
			return false;
		if (ff[1] == 0xD9)
			return true;
		m = (size_t)(ff - p);
	}
	return false;
}

int decoder_open(struct decoder *d, const uint8_t *jpeg, size_t len, uint32_t *width, uint32_t *height)
{
	struct jpeg_decompress_struct *c;
	int r;

	if (!d || (!jpeg && len) || !width || !height || d->state != DECODER_IDLE)
		return -EINVAL;
	c = &d->cinfo;
	d->error[0] = '\0';
	if (len == 0)
		return set_error(d, -EBADMSG, "Empty input file");

	if (setjmp(d->env)) {
		r = d->code;
		goto fail;
	}
	jpeg_mem_src(c, jpeg, (unsigned long)len);
	if (jpeg_read_header(c, TRUE) != JPEG_HEADER_OK) {
		r = set_error(d, -EBADMSG, "No image in JPEG datastream");
		goto fail;
	}
	/* Before any pixel memory is committed. */
	if ((uint64_t)c->image_width * c->image_height > d->max_pixels) {
		snprintf(d->error, sizeof(d->error), "Image of %ux%u pixels over the limit of %llu", c->image_width,
			 c->image_height, (unsigned long long)d->max_pixels);
		r = -E2BIG;
		goto fail;
	}
	switch (c->jpeg_color_space) {
	case JCS_GRAYSCALE:
	case JCS_YCbCr:
	case JCS_RGB:
		/* RGBA, not RGBX: libjpeg-turbo leaves X unwritten, and the vertical pass reads every byte */
		c->out_color_space = JCS_EXT_RGBA;
		d->cmyk = false;
		break;
	case JCS_CMYK:
	case JCS_YCCK:
		c->out_color_space = JCS_CMYK;
		d->cmyk = true;
		break;
	default: r = set_error(d, -EBADMSG, "Unsupported JPEG colour space"); goto fail;
	}
	if (!has_eoi(c->src->next_input_byte, c->src->bytes_in_buffer)) {
		r = set_error(d, -EBADMSG, "Premature end of JPEG file");
		goto fail;
	}
	d->state = DECODER_OPEN;
	*width = c->image_width;
	*height = c->image_height;
	return 0;

fail:
	jpeg_abort_decompress(c);
	return r;
}

void decoder_scaled_size(const struct decoder *d, unsigned denom, uint32_t *width, uint32_t *height)
{
	/* libjpeg's jdiv_round_up(image_width * scale_num, scale_denom), for scale_num 1 */
	*width = (uint32_t)(((uint64_t)d->cinfo.image_width + denom - 1) / denom);
	*height = (uint32_t)(((uint64_t)d->cinfo.image_height + denom - 1) / denom);
}

/*
 * In place, CMYK to RGBX as Pillow does it: it reads every CMYK JPEG as
 * Adobe-inverted ("CMYK;I"), so the stored byte s is 255 - ink, and then
 * R = (255 - K) - C * (255 - K) / 255.
 */
static void cmyk_to_rgbx(uint8_t *buf, size_t stride, uint32_t width, uint32_t rows)
{
	for (uint32_t y = 0; y < rows; y++) {
		uint8_t *p = buf + y * stride;

		for (uint32_t x = 0; x < width; x++, p += 4) {
			unsigned k = 255u - p[3];

			p[0] = image_cmyk_channel(255u - p[0], k);
			p[1] = image_cmyk_channel(255u - p[1], k);
			p[2] = image_cmyk_channel(255u - p[2], k);
			p[3] = 255;
		}
	}
}

int decoder_read(struct decoder *d, unsigned denom, uint32_t x0, uint32_t y0, uint32_t x1, uint32_t y1,
		 struct decoded_region *out)
{
	struct jpeg_decompress_struct *c;
	uint32_t sw, sh, rows;
	JDIMENSION xoff, cw;
	size_t row_bytes;

	if (!d || !out || d->state != DECODER_OPEN || (denom != 1 && denom != 2 && denom != 4 && denom != 8))
		return -EINVAL;
	decoder_scaled_size(d, denom, &sw, &sh);
	if (x0 >= x1 || y0 >= y1 || x1 > sw || y1 > sh)
		return -EINVAL;
	c = &d->cinfo;
	d->state = DECODER_READ;

	if (setjmp(d->env))
		return d->code;
	c->scale_num = 1;
	c->scale_denom = denom;
	jpeg_start_decompress(c);
	if (c->output_width != sw || c->output_height != sh || c->output_components != 4)
		return set_error(d, -EBADMSG, "Unexpected decoder output geometry");

	/*
	 * libjpeg widens the columns to iMCU boundaries; xoff and cw say what it
	 * chose. Ask for one more column each side: fancy upsampling of the
	 * crop's outermost columns lacks its neighbours and would differ from a
	 * full decode.
	 */
	xoff = x0 > 0 ? x0 - 1 : 0;
	cw = (x1 < c->output_width ? x1 + 1 : x1) - xoff;
	if (cw < c->output_width)
		jpeg_crop_scanline(c, &xoff, &cw);
	if (xoff > x0 || xoff + cw < x1)
		return set_error(d, -EBADMSG, "Unexpected crop from the decoder");
	row_bytes = (size_t)cw * 4;
	rows = y1 - y0;
	if (grow((void **)&d->buf, &d->buf_cap, row_bytes * rows, 1) < 0 ||
	    grow((void **)&d->rows, &d->rows_cap, rows, sizeof(*d->rows)) < 0)
		return set_error(d, -ENOMEM, "Out of memory for decoded rows");
	for (uint32_t i = 0; i < rows; i++)
		d->rows[i] = d->buf + i * row_bytes;

	if (y0 > 0 && jpeg_skip_scanlines(c, y0) != y0)
		return set_error(d, -EBADMSG, "Could not skip to the first row");
	while (c->output_scanline < y1) {
		if (jpeg_read_scanlines(c, d->rows + (c->output_scanline - y0), y1 - c->output_scanline) == 0)
			return set_error(d, -EBADMSG, "Decoder returned no rows");
	}
	if (d->cmyk)
		cmyk_to_rgbx(d->buf, row_bytes, cw, rows);

	out->pixels = d->buf + (size_t)(x0 - xoff) * 4;
	out->stride = row_bytes;
	out->width = x1 - x0;
	out->height = rows;
	return 0;
}

void decoder_finish(struct decoder *d)
{
	if (!d)
		return;
	/* Drops the rest of the file unread and frees libjpeg's per-image memory. */
	jpeg_abort_decompress(&d->cinfo);
	d->state = DECODER_IDLE;
}
