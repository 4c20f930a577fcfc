/* SPDX-License-Identifier: MIT */
/*
 * The device ring's slot ownership (devring.c) over a plain-memory backend
 * that does what daemon/gpu/gpu.c asks the GPU to do: wait until the slot's
 * release word reaches the ring's count of its releases (cuStreamWaitValue64),
 * copy the host slot, convert HWC uint8 to CHW with the normalisation table,
 * call back; and, when the client has gone, write the words from the CPU so
 * that copies waiting on a dead client's release run. Also: the
 * table-and-layout conversion the kernel (gpu_convert.cu) performs gives
 * the CPU float path's bytes exactly, on a real photograph.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "augment.h"
#include "devring.h"

#define SLOTS 3
#define BATCH 2
#define SIDE 8
#define PIXELS (SIDE * SIDE)

/* What gpu_convert.cu computes, in C: out[b][c][y][x] = lut[c][in[b][y][x][c]]. */
static void kernel_emulated(const uint8_t *in, void *out, const union transform_lut *lut, enum sample_dtype dt,
			    size_t plane, size_t pixels)
{
	for (size_t p = 0; p < pixels; p++) {
		size_t image = p / plane, at = p % plane;

		for (int c = 0; c < 3; c++) {
			size_t o = image * 3 * plane + (size_t)c * plane + at;

			if (dt == DTYPE_FLOAT16)
				((uint16_t *)out)[o] = lut->f16[c][in[p * 3 + c]];
			else
				((float *)out)[o] = lut->f32[c][in[p * 3 + c]];
		}
	}
}

/* The plain-memory "GPU": queued copies run when the test says so. */
struct fake_gpu {
	struct devring *dr;
	uint8_t host[SLOTS][BATCH * PIXELS * 3];
	uint8_t device[SLOTS][BATCH * PIXELS * 3 * 4];
	enum sample_dtype dtype;
	union transform_lut lut;
	int queued[SLOTS];      /* count, 0: none */
	uint64_t words[SLOTS];  /* the release words (host memory both sides map) */
	uint64_t target[SLOTS]; /* what the queued copy waits for */
	int unblocks;
	int fail_submit, fail_copy;
	int closes, writes_while_held;
	bool held[SLOTS]; /* the "client" reads the device slot */
};

static int fake_submit(void *backend, uint32_t slot, uint32_t count)
{
	struct fake_gpu *g = backend;

	if (g->fail_submit)
		return -EIO;
	g->queued[slot] = (int)count;
	g->target[slot] = devring_release_target(g->dr, slot);
	return 0;
}

static void fake_unblock(void *backend)
{
	struct fake_gpu *g = backend;

	g->unblocks++;
	for (uint32_t s = 0; s < SLOTS; s++)
		g->words[s] = devring_release_target(g->dr, s);
}

static void fake_close(void *backend)
{
	struct fake_gpu *g = backend;

	g->closes++;
	devring_closed(g->dr);
}

static const struct devring_ops fake_ops = {.submit = fake_submit, .close = fake_close, .unblock = fake_unblock};

/* The client's stream reaches its release of `slot`: the word advances. */
static void client_word_lands(struct fake_gpu *g, uint32_t slot)
{
	g->words[slot]++;
}

/* The stream runs slot's copy: the client must have let go of it. */
static void run_copy(struct fake_gpu *g, uint32_t slot)
{
	int count = g->queued[slot];

	assert_true(count > 0);
	/* The stream's wait: never past a release the client has not made. */
	assert_true(devring_word_reached(g->words[slot], g->target[slot]));
	g->queued[slot] = 0;
	if (g->held[slot])
		g->writes_while_held++;
	if (g->dtype == DTYPE_UINT8)
		memcpy(g->device[slot], g->host[slot], (size_t)count * PIXELS * 3);
	else
		kernel_emulated(g->host[slot], g->device[slot], &g->lut, g->dtype, PIXELS, (size_t)count * PIXELS);
	assert_int_equal(devring_copied(g->dr, slot, g->fail_copy ? -EIO : 0), g->fail_copy ? -EIO : 0);
}

static void fill_host(struct fake_gpu *g, uint32_t slot, uint8_t seed)
{
	for (size_t i = 0; i < sizeof(g->host[slot]); i++)
		g->host[slot][i] = (uint8_t)(seed * 31 + i * 7);
}

static void setup(struct fake_gpu *g, struct devring *dr, enum sample_dtype dt)
{
	struct transform_spec spec = {.dtype = dt, .mean = {0.485f, 0.456f, 0.406f}, .std = {0.229f, 0.224f, 0.225f}};

	memset(g, 0, sizeof(*g));
	g->dr = dr;
	g->dtype = dt;
	if (dt != DTYPE_UINT8)
		transform_lut_build(&spec, &g->lut);
	assert_int_equal(devring_init(dr, SLOTS, &fake_ops, g), 0);
}

static void test_slot_life(void **state)
{
	struct fake_gpu g;
	struct devring dr;

	setup(&g, &dr, DTYPE_UINT8);
	fill_host(&g, 0, 1);
	assert_int_equal(devring_submit(&dr, 0, BATCH), 0);
	assert_int_equal(devring_state(&dr, 0), DEVSLOT_COPYING);
	/* Nothing but FREE takes a copy; nothing is delivered before it is back. */
	assert_int_equal(devring_submit(&dr, 0, BATCH), -EBUSY);
	assert_int_equal(devring_deliver(&dr, 0), -EINVAL);
	assert_int_equal(devring_release(&dr, 0), -EINVAL);
	run_copy(&g, 0);
	assert_int_equal(devring_state(&dr, 0), DEVSLOT_READY);
	assert_memory_equal(g.device[0], g.host[0], sizeof(g.host[0]));
	assert_int_equal(devring_deliver(&dr, 0), 0);
	g.held[0] = true;
	/* The client holds it: no copy may be queued into it. */
	assert_int_equal(devring_submit(&dr, 0, BATCH), -EBUSY);
	assert_int_equal(devring_drop(&dr, 0), -EINVAL);
	g.held[0] = false;
	client_word_lands(&g, 0);
	assert_int_equal(devring_release(&dr, 0), 0);
	assert_int_equal(devring_release(&dr, 0), -EINVAL); /* twice */
	assert_int_equal(devring_release_target(&dr, 0), 1);
	fill_host(&g, 0, 2);
	assert_int_equal(devring_submit(&dr, 0, 1), 0);
	run_copy(&g, 0);
	assert_memory_equal(g.device[0], g.host[0], PIXELS * 3); /* a short last batch */
	/* A batch nobody will take (a new epoch) is dropped. */
	assert_int_equal(devring_drop(&dr, 0), 0);
	assert_int_equal(devring_state(&dr, 0), DEVSLOT_FREE);
	/* Out of range. */
	assert_int_equal(devring_submit(&dr, SLOTS, 1), -EBUSY);
	assert_int_equal(devring_deliver(&dr, SLOTS), -EINVAL);
	assert_int_equal(devring_submit(&dr, 1, 0), -EINVAL);
	assert_int_equal(dr.copies, 2);
	assert_int_equal(g.writes_while_held, 0);
	devring_close(&dr);
	assert_int_equal(g.closes, 1);
	assert_true(dr.closed);
	devring_release_state(&dr);
}

static void test_close_waits_for_copies(void **state)
{
	struct fake_gpu g;
	struct devring dr;

	setup(&g, &dr, DTYPE_UINT8);
	for (uint32_t s = 0; s < SLOTS; s++) {
		fill_host(&g, s, (uint8_t)s);
		assert_int_equal(devring_submit(&dr, s, BATCH), 0);
	}
	assert_int_equal(dr.copying, SLOTS);
	devring_close(&dr);
	devring_close(&dr); /* idempotent */
	assert_int_equal(g.closes, 0);
	assert_int_equal(g.unblocks, 1);
	/* No new copies once closing. */
	run_copy(&g, 0);
	assert_int_equal(devring_deliver(&dr, 0), 0);
	assert_int_equal(devring_release(&dr, 0), 0);
	assert_int_equal(devring_submit(&dr, 0, BATCH), -ESHUTDOWN);
	run_copy(&g, 2);
	assert_int_equal(g.closes, 0);
	run_copy(&g, 1);
	assert_int_equal(g.closes, 1); /* the last copy back: the backend closes */
	assert_true(dr.closed);
	devring_release_state(&dr);
}

/*
 * A client SIGKILLed with GPU work queued before its release: the work is
 * discarded, its release word never advances, and the copy the daemon
 * queued into the released slot would wait for ever, holding the ring (and
 * its memory and budget share) until a restart. Closing writes the words
 * from the CPU: the copy runs, the ring closes.
 */
static void test_dead_client_does_not_wedge_the_ring(void **state)
{
	struct fake_gpu g;
	struct devring dr;

	setup(&g, &dr, DTYPE_UINT8);
	for (uint32_t s = 0; s < 2; s++) {
		fill_host(&g, s, (uint8_t)s);
		assert_int_equal(devring_submit(&dr, s, BATCH), 0);
		run_copy(&g, s);
		assert_int_equal(devring_deliver(&dr, s), 0);
	}
	/* Slot 0: released properly (its word landed), refilled, copied. */
	client_word_lands(&g, 0);
	assert_int_equal(devring_release(&dr, 0), 0);
	assert_int_equal(devring_submit(&dr, 0, BATCH), 0);
	run_copy(&g, 0);
	/* Slot 1: the client queued a long kernel, then its release; it said
	 * Release and was killed before its stream got there. */
	assert_int_equal(devring_release(&dr, 1), 0);
	assert_int_equal(devring_submit(&dr, 1, BATCH), 0);
	assert_false(devring_word_reached(g.words[1], g.target[1])); /* the copy waits */
	assert_int_equal(g.target[1], 1);
	/* The connection goes: the session closes its ring. */
	devring_close(&dr);
	assert_int_equal(g.unblocks, 1);
	assert_true(devring_word_reached(g.words[1], g.target[1]));
	assert_int_equal(g.closes, 0); /* the copy is still in flight */
	run_copy(&g, 1);
	assert_int_equal(g.closes, 1);
	assert_true(dr.closed);
	assert_int_equal(dr.copies, 4);
	devring_release_state(&dr);
}

/* The words compare cyclically, like cuStreamWaitValue64's GEQ. */
static void test_word_comparison(void **state)
{
	(void)state;
	assert_true(devring_word_reached(5, 5));
	assert_true(devring_word_reached(6, 5));
	assert_false(devring_word_reached(4, 5));
	assert_true(devring_word_reached(2, UINT64_MAX - 1)); /* wrapped */
	assert_false(devring_word_reached(UINT64_MAX, 1));
}

static void test_failures(void **state)
{
	struct fake_gpu g;
	struct devring dr;

	setup(&g, &dr, DTYPE_UINT8);
	g.fail_submit = 1;
	assert_int_equal(devring_submit(&dr, 1, BATCH), -EIO);
	assert_int_equal(devring_state(&dr, 1), DEVSLOT_FREE); /* nothing queued, still free */
	g.fail_submit = 0;
	assert_int_equal(devring_submit(&dr, 1, BATCH), 0);
	g.fail_copy = 1;
	run_copy(&g, 1);
	assert_int_equal(devring_state(&dr, 1), DEVSLOT_FREE); /* never delivered */
	assert_int_equal(dr.failures, 2);
	assert_int_equal(devring_copied(&dr, 1, 0), -EINVAL); /* no copy in flight */
	assert_int_equal(devring_init(&dr, 0, &fake_ops, &g), -EINVAL);
	devring_close(&dr);
	assert_int_equal(g.closes, 1);
	devring_release_state(&dr);
	devring_release_state(NULL);
}

/* Float output: each slot converted with the table, CHW. */
static void test_conversion_through_the_ring(void **state)
{
	static const enum sample_dtype dts[] = {DTYPE_FLOAT32, DTYPE_FLOAT16};

	for (size_t k = 0; k < 2; k++) {
		struct fake_gpu g;
		struct devring dr;

		setup(&g, &dr, dts[k]);
		fill_host(&g, 2, 9);
		assert_int_equal(devring_submit(&dr, 2, BATCH), 0);
		run_copy(&g, 2);
		for (size_t b = 0; b < BATCH; b++)
			for (size_t i = 0; i < PIXELS; i++)
				for (int c = 0; c < 3; c++) {
					uint8_t v = g.host[2][(b * PIXELS + i) * 3 + c];
					size_t o = (b * 3 + (size_t)c) * PIXELS + i;

					if (dts[k] == DTYPE_FLOAT32)
						assert_memory_equal(&((float *)g.device[2])[o], &g.lut.f32[c][v], 4);
					else
						assert_int_equal(((uint16_t *)g.device[2])[o], g.lut.f16[c][v]);
				}
		devring_close(&dr);
		devring_release_state(&dr);
	}
}

/* The GPU design (host uint8, then the table on the device) equals the CPU
 * float path bit for bit, on a photograph and a non-default mean/std. */
static void test_same_bytes_as_cpu_float_path(void **state)
{
	FILE *f = fopen("data/photos/rocket.jpg", "rb");
	struct decode_limits lim = {.max_pixels = 1ull << 26};
	struct pipeline *p = NULL;
	uint8_t *jpeg, *u8, *cpu, *gpu;
	long len;

	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	len = ftell(f);
	rewind(f);
	jpeg = malloc((size_t)len);
	assert_non_null(jpeg);
	assert_int_equal(fread(jpeg, 1, (size_t)len, f), (size_t)len);
	fclose(f);
	assert_int_equal(pipeline_new(&lim, &p), 0);
	for (int dt = DTYPE_FLOAT32; dt <= DTYPE_FLOAT16; dt++) {
		struct transform_spec spec = {.kind = TRANSFORM_CENTER_CROP,
					      .image_size = 96,
					      .dtype = DTYPE_UINT8,
					      .mean = {0.5f, 0.25f, 0.125f},
					      .std = {0.3f, 0.7f, 0.11f}};
		union transform_lut lut;
		size_t plane = 96 * 96;

		u8 = malloc(transform_output_bytes(&spec));
		assert_int_equal(pipeline_run(p, jpeg, (size_t)len, &spec, NULL, u8), 0);
		spec.dtype = (enum sample_dtype)dt;
		cpu = malloc(transform_output_bytes(&spec));
		gpu = malloc(transform_output_bytes(&spec));
		assert_int_equal(pipeline_run(p, jpeg, (size_t)len, &spec, NULL, cpu), 0);
		transform_lut_build(&spec, &lut);
		kernel_emulated(u8, gpu, &lut, spec.dtype, plane, plane);
		assert_memory_equal(cpu, gpu, transform_output_bytes(&spec));
		free(u8);
		free(cpu);
		free(gpu);
	}
	pipeline_free(p);
	free(jpeg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slot_life),
		cmocka_unit_test(test_close_waits_for_copies),
		cmocka_unit_test(test_dead_client_does_not_wedge_the_ring),
		cmocka_unit_test(test_word_comparison),
		cmocka_unit_test(test_failures),
		cmocka_unit_test(test_conversion_through_the_ring),
		cmocka_unit_test(test_same_bytes_as_cpu_float_path),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
