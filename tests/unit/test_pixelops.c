/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pixelops.h"

#define W 16
#define H 12

static uint8_t px[W * H * 3], orig[W * H * 3];

static struct rgb_image gradient(void)
{
	for (int y = 0; y < H; y++)
		for (int x = 0; x < W; x++) {
			uint8_t *p = px + (y * W + x) * 3;

			p[0] = (uint8_t)(50 + x * 3);
			p[1] = (uint8_t)(60 + y * 4);
			p[2] = (uint8_t)(70 + x + y);
		}
	memcpy(orig, px, sizeof(px));
	return (struct rgb_image){.px = px, .width = W, .height = H, .stride = W * 3};
}

/* Parse "key=v[,v...]" / "key=text" pairs into op_params (static storage). */
static size_t params_of(struct op_param *ps, double nums[][4], const char **kv, size_t n)
{
	static char keys[16][32];

	for (size_t i = 0; i < n; i++) {
		const char *eq = strchr(kv[i], '=');
		char *end;
		size_t k = 0;

		snprintf(keys[i], sizeof(keys[i]), "%.*s", (int)(eq - kv[i]), kv[i]);
		ps[i] = (struct op_param){.key = keys[i], .numbers = nums[i]};
		for (const char *t = eq + 1; k < 4; t = end + 1) {
			nums[i][k] = strtod(t, &end);
			if (end == t)
				break;
			k++;
			if (*end != ',')
				break;
		}
		if (!k)
			ps[i].text = eq + 1;
		ps[i].n_numbers = k;
	}
	return n;
}

/* op refused, its message naming op and parameter */
static void refused(const char *name, const char *param, size_t n, ...)
{
	struct op_param ps[8];
	double nums[8][4];
	const char *kv[8];
	struct pixel_op *op = NULL;
	char err[256];
	va_list ap;

	va_start(ap, n);
	for (size_t i = 0; i < n; i++)
		kv[i] = va_arg(ap, const char *);
	va_end(ap);
	params_of(ps, nums, kv, n);
	assert_int_equal(pixel_op_parse(name, ps, n, &op, err, sizeof(err)), -EINVAL);
	assert_null(op);
	if (!strstr(err, name) || !strstr(err, param))
		fail_msg("%s / %s: message \"%s\"", name, param, err);
}

static void test_bounds_refused(void **state)
{
	(void)state;
	refused("NoSuchOp", "unknown op", 0);
	refused("ColorJitter", "brightness", 1, "brightness=-0.1");
	refused("ColorJitter", "contrast", 1, "contrast=1.5,0.5");
	refused("ColorJitter", "hue", 1, "hue=0.6");
	refused("ColorJitter", "hue", 1, "hue=-0.7,0.2");
	refused("ColorJitter", "gamma", 1, "gamma=1");
	refused("RandomGrayscale", "p", 1, "p=-0.5");
	refused("RandomGrayscale", "p", 1, "p=1.5");
	refused("Grayscale", "num_output_channels", 1, "num_output_channels=1");
	refused("GaussianBlur", "kernel_size", 0);
	refused("GaussianBlur", "kernel_size", 1, "kernel_size=4");
	refused("GaussianBlur", "kernel_size", 1, "kernel_size=0");
	refused("GaussianBlur", "sigma", 2, "kernel_size=3", "sigma=2,1");
	refused("GaussianBlur", "sigma", 2, "kernel_size=3", "sigma=0");
	refused("RandomPosterize", "bits", 1, "bits=9");
	refused("RandomPosterize", "bits", 0);
	refused("RandomPosterize", "bits", 1, "bits=2.5");
	refused("RandomPosterize", "bits", 1, "bits=0");
	refused("RandomSolarize", "threshold", 1, "threshold=-1");
	refused("RandomSolarize", "p", 2, "threshold=100", "p=2");
	refused("RandomAdjustSharpness", "sharpness_factor", 1, "sharpness_factor=-1");
	refused("RandomEqualize", "p", 1, "p=text");
	refused("RandomInvert", "p", 2, "p=0.5", "p=0.5");
	refused("RandAugment", "magnitude", 1, "magnitude=31");
	refused("RandAugment", "magnitude", 2, "num_magnitude_bins=5", "magnitude=5");
	refused("RandAugment", "num_ops", 1, "num_ops=-1");
	refused("RandAugment", "fill", 1, "fill=1,2");
	refused("RandAugment", "fill", 1, "fill=256");
	refused("TrivialAugmentWide", "interpolation", 1, "interpolation=lanczos");
	refused("AutoAugment", "policy", 1, "policy=mnist");
	refused("AugMix", "severity", 1, "severity=11");
	refused("AugMix", "mixture_width", 1, "mixture_width=0");
	refused("AugMix", "alpha", 1, "alpha=0");
	refused("AugMix", "all_ops", 1, "all_ops=maybe");
	refused("AugMix", "all_ops", 1, "all_ops=2");
	refused("AugMix", "interpolation", 1, "interpolation=bicubic");
	refused("rand_augment_transform", "config_str", 0);
	refused("rand_augment_transform", "config_str", 1, "config_str=augmix-m5");
	refused("rand_augment_transform", "config_str", 1, "config_str=rand-m9-q4");
	refused("rand_augment_transform", "config_str", 1, "config_str=rand-m9-n99");
	refused("auto_augment_transform", "config_str", 1, "config_str=v1");
	refused("auto_augment_transform", "interpolation", 2, "config_str=v0", "interpolation=box");
}

static void apply_once(const char *name, size_t n, ...)
{
	struct op_param ps[8];
	double nums[8][4];
	const char *kv[8];
	struct pixel_scratch *s = NULL;
	struct pixel_op *op = NULL;
	struct rgb_image im = {.px = px, .width = W, .height = H, .stride = W * 3};
	struct rng rng;
	char err[256];
	va_list ap;

	va_start(ap, n);
	for (size_t i = 0; i < n; i++)
		kv[i] = va_arg(ap, const char *);
	va_end(ap);
	params_of(ps, nums, kv, n);
	if (pixel_op_parse(name, ps, n, &op, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	assert_int_equal(pixel_scratch_new(&s), 0);
	rng_init(&rng, 7, 0, 0, RNG_AUGMENT);
	assert_int_equal(pixel_op_apply(op, &im, &rng, s), 0);
	assert_int_equal(im.width, W);
	assert_int_equal(im.height, H);
	pixel_op_free(op);
	pixel_scratch_free(s);
}

static void test_tables(void **state)
{
	(void)state;
	gradient();
	apply_once("RandomInvert", 1, "p=1");
	for (size_t i = 0; i < sizeof(px); i++)
		assert_int_equal(px[i], 255 - orig[i]);
	apply_once("RandomInvert", 1, "p=1");
	assert_memory_equal(px, orig, sizeof(px));

	apply_once("RandomInvert", 1, "p=0");
	assert_memory_equal(px, orig, sizeof(px));

	apply_once("RandomPosterize", 2, "bits=1", "p=1");
	for (size_t i = 0; i < sizeof(px); i++)
		assert_int_equal(px[i], orig[i] & 0x80);

	gradient();
	apply_once("RandomSolarize", 2, "threshold=80", "p=1");
	for (size_t i = 0; i < sizeof(px); i++)
		assert_int_equal(px[i], orig[i] < 80 ? orig[i] : 255 - orig[i]);

	/* autocontrast stretches each band to 0..255 */
	gradient();
	apply_once("RandomAutocontrast", 1, "p=1");
	for (int c = 0; c < 3; c++) {
		int lo = 255, hi = 0;

		for (size_t i = (size_t)c; i < sizeof(px); i += 3) {
			lo = px[i] < lo ? px[i] : lo;
			hi = px[i] > hi ? px[i] : hi;
		}
		assert_int_equal(lo, 0);
		assert_int_equal(hi, 255);
	}

	/* equalize keeps the order of levels and spreads them */
	gradient();
	apply_once("RandomEqualize", 1, "p=1");
	for (size_t i = 0; i + 3 < sizeof(px); i += 3)
		if (orig[i] < orig[i + 3])
			assert_true(px[i] <= px[i + 3]);
}

static void test_enhance(void **state)
{
	(void)state;
	gradient();
	apply_once("ColorJitter", 1, "brightness=0,0");
	for (size_t i = 0; i < sizeof(px); i++)
		assert_int_equal(px[i], 0);

	gradient();
	apply_once("ColorJitter", 1, "saturation=0,0");
	for (size_t i = 0; i < sizeof(px); i += 3) {
		assert_int_equal(px[i], px[i + 1]);
		assert_int_equal(px[i], px[i + 2]);
	}

	/* contrast 0: one grey level, the image's mean luma */
	gradient();
	apply_once("ColorJitter", 1, "contrast=0,0");
	for (size_t i = 0; i < sizeof(px); i++)
		assert_int_equal(px[i], px[0]);
	assert_true(px[0] > 60 && px[0] < 110);

	gradient();
	apply_once("Grayscale", 1, "num_output_channels=3");
	for (size_t i = 0; i < sizeof(px); i += 3)
		assert_int_equal(px[i], (orig[i] * 19595 + orig[i + 1] * 38470 + orig[i + 2] * 7471 + 0x8000) >> 16);

	/* factor 1 and the identity jitter change nothing */
	gradient();
	apply_once("RandomAdjustSharpness", 2, "sharpness_factor=1", "p=1");
	assert_memory_equal(px, orig, sizeof(px));
	apply_once("ColorJitter", 0);
	assert_memory_equal(px, orig, sizeof(px));
	apply_once("ColorJitter", 1, "hue=0,0");
	assert_memory_equal(px, orig, sizeof(px));
}

static void test_blur_constant(void **state)
{
	(void)state;
	memset(px, 77, sizeof(px));
	apply_once("GaussianBlur", 2, "kernel_size=5", "sigma=0.5,3");
	for (size_t i = 0; i < sizeof(px); i++)
		assert_int_equal(px[i], 77);
	/* and a gradient stays within its range */
	gradient();
	apply_once("GaussianBlur", 2, "kernel_size=7,3", "sigma=2");
	for (size_t i = 0; i < sizeof(px); i += 3)
		assert_true(px[i] >= 50 && px[i] <= 50 + 3 * (W - 1));
}

/* Same stream, same draws, same pixels; another sample, other draws. */
/* Every policy runs on a small image, many samples, the image keeping its size. */
static void test_policies_run(void **state)
{
	const char *cases[][3] = {
		{"RandAugment", "num_ops=3", "interpolation=bilinear"},
		{"TrivialAugmentWide", "fill=1,2,3", "interpolation=bicubic"},
		{"AutoAugment", "policy=imagenet", "fill=128"},
		{"AugMix", "severity=5", "all_ops=0"},
		{"AugMix", "chain_depth=2", "fill=9,8,7"},
		{"AugMix", "all_ops=false", "alpha=2"},
		{"rand_augment_transform", "config_str=rand-m9-mstd0.5-inc1", "img_mean=124,116,104"},
		{"rand_augment_transform", "config_str=rand-m15-n4-mstd101-mmax20", "interpolation=random"},
		{"auto_augment_transform", "config_str=original-mstd0.5", "interpolation=bilinear"},
		{"auto_augment_transform", "config_str=v0", "translate_pct=0.3"},
	};
	struct rgb_image im = {.px = px, .width = W, .height = H, .stride = W * 3};
	struct pixel_scratch *s = NULL;

	(void)state;
	assert_int_equal(pixel_scratch_new(&s), 0);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct op_param ps[2];
		double nums[2][4];
		struct pixel_op *op = NULL;
		char err[256];
		int changed = 0;

		params_of(ps, nums, &cases[c][1], 2);
		if (pixel_op_parse(cases[c][0], ps, 2, &op, err, sizeof(err)) < 0)
			fail_msg("%s", err);
		for (uint64_t i = 0; i < 200; i++) {
			struct rng rng;

			gradient();
			rng_init(&rng, 3, 0, i, RNG_AUGMENT);
			assert_int_equal(pixel_op_apply(op, &im, &rng, s), 0);
			assert_int_equal(im.width, W);
			assert_int_equal(im.height, H);
			changed += memcmp(px, orig, sizeof(px)) != 0;
		}
		/* most samples change (a few draw the identity or skip every op) */
		if (changed < 100)
			fail_msg("%s: %d of 200 changed", cases[c][0], changed);
		pixel_op_free(op);
	}
	pixel_scratch_free(s);
}

/* Every op on degenerate sizes (1x1, a row, a column, 2x2) with extreme parameters: no crash, size kept. */
static void test_tiny_images(void **state)
{
	const char *cases[][3] = {
		{"ColorJitter", "brightness=0.9", "hue=0.5"},
		{"ColorJitter", "contrast=5", "saturation=5"},
		{"GaussianBlur", "kernel_size=255,3", "sigma=50"},
		{"RandomAdjustSharpness", "sharpness_factor=100", "p=1"},
		{"RandomEqualize", "p=1", NULL},
		{"RandomAutocontrast", "p=1", NULL},
		{"RandAugment", "num_ops=16", "interpolation=bicubic"},
		{"RandAugment", "num_ops=8", "interpolation=nearest"},
		{"TrivialAugmentWide", "interpolation=bilinear", NULL},
		{"AutoAugment", "interpolation=nearest", NULL},
		{"AugMix", "severity=10", "mixture_width=16"},
		{"AugMix", "interpolation=nearest", "alpha=0.01"},
		{"rand_augment_transform", "config_str=rand-m30-n16-mstd101-mmax30", NULL},
		{"auto_augment_transform", "config_str=original-mstd5", NULL},
	};
	const uint32_t sizes[][2] = {{1, 1}, {7, 1}, {1, 5}, {2, 2}};
	struct pixel_scratch *s = NULL;

	(void)state;
	assert_int_equal(pixel_scratch_new(&s), 0);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct op_param ps[2];
		double nums[2][4];
		struct pixel_op *op = NULL;
		size_t n = cases[c][2] ? 2 : 1;
		char err[256];

		params_of(ps, nums, &cases[c][1], n);
		if (pixel_op_parse(cases[c][0], ps, n, &op, err, sizeof(err)) < 0)
			fail_msg("%s", err);
		for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++)
			for (uint64_t i = 0; i < 50; i++) {
				/* a stride wider than the row, its padding left alone */
				struct rgb_image im = {.px = px,
						       .width = sizes[z][0],
						       .height = sizes[z][1],
						       .stride = sizes[z][0] * 3 + 5};
				struct rng rng;

				memset(px, 0xa5, sizeof(px));
				for (uint32_t y = 0; y < im.height; y++)
					for (uint32_t x = 0; x < im.width * 3; x++)
						px[y * im.stride + x] = (uint8_t)(x * 40 + y * 90 + i);
				rng_init(&rng, 5, 0, i, RNG_AUGMENT);
				assert_int_equal(pixel_op_apply(op, &im, &rng, s), 0);
				assert_int_equal(im.width, sizes[z][0]);
				assert_int_equal(im.height, sizes[z][1]);
				for (uint32_t y = 0; y < im.height; y++)
					for (size_t x = im.width * 3; x < im.stride; x++)
						assert_int_equal(px[y * im.stride + x], 0xa5);
			}
		pixel_op_free(op);
	}
	pixel_scratch_free(s);
}

static void test_deterministic(void **state)
{
	struct op_param ps[4];
	double nums[4][4];
	const char *kv[] = {"brightness=0.4", "contrast=0.4", "saturation=0.4", "hue=0.1"};
	struct pixel_op *op = NULL;
	struct pixel_scratch *s = NULL;
	uint8_t a[sizeof(px)], b[sizeof(px)];
	struct rgb_image im = {.px = px, .width = W, .height = H, .stride = W * 3};
	struct rng rng;
	char err[256];
	int differ = 0;

	(void)state;
	params_of(ps, nums, kv, 4);
	assert_int_equal(pixel_op_parse("ColorJitter", ps, 4, &op, err, sizeof(err)), 0);
	assert_int_equal(pixel_scratch_new(&s), 0);
	for (uint64_t idx = 0; idx < 8; idx++) {
		gradient();
		rng_init(&rng, 1, 2, idx, RNG_AUGMENT);
		assert_int_equal(pixel_op_apply(op, &im, &rng, s), 0);
		memcpy(a, px, sizeof(px));
		gradient();
		rng_init(&rng, 1, 2, idx, RNG_AUGMENT);
		assert_int_equal(pixel_op_apply(op, &im, &rng, s), 0);
		memcpy(b, px, sizeof(px));
		assert_memory_equal(a, b, sizeof(a));
		gradient();
		rng_init(&rng, 1, 2, idx + 100, RNG_AUGMENT);
		assert_int_equal(pixel_op_apply(op, &im, &rng, s), 0);
		differ += memcmp(a, px, sizeof(px)) != 0;
	}
	assert_true(differ >= 6);
	pixel_op_free(op);
	pixel_scratch_free(s);
	pixel_op_free(NULL);
	pixel_scratch_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bounds_refused), cmocka_unit_test(test_tables),
		cmocka_unit_test(test_enhance),        cmocka_unit_test(test_blur_constant),
		cmocka_unit_test(test_policies_run),   cmocka_unit_test(test_tiny_images),
		cmocka_unit_test(test_deterministic),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
