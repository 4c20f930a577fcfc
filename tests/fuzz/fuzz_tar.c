/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: tar shards' untrusted inputs. The first byte picks
 *   0: the rest as a tar archive into tar_index_build(): every member it
 *      returns must lie inside the archive, its data block-aligned;
 *   1: the rest as a brace pattern into shards_expand() (bounded);
 *   2: the rest as a member name into shards_key_split().
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "shards.h"
#include "tar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct mem {
	const uint8_t *p;
	size_t n;
};

static int64_t mem_read(void *ctx, uint64_t off, void *dst, size_t len)
{
	struct mem *m = ctx;

	if (off >= m->n)
		return 0;
	if (len > m->n - off)
		len = (size_t)(m->n - off);
	memcpy(dst, m->p + off, len);
	return (int64_t)len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mem m = {data + 1, size ? size - 1 : 0};
	char *text;

	if (size == 0)
		return 0;
	if (data[0] == 0) {
		struct tar_index t = {0};
		uint64_t err_off;
		char why[128];

		if (tar_index_build(mem_read, &m, m.n, 4096, &t, &err_off, why, sizeof(why)) == 0) {
			for (size_t i = 0; i < t.n; i++) {
				if (t.v[i].offset % TAR_BLOCK || t.v[i].offset > m.n ||
				    t.v[i].size > m.n - t.v[i].offset || strlen(tar_member_name(&t, i)) >= TAR_MAX_NAME)
					abort();
			}
		} else if (err_off > m.n) {
			abort();
		}
		tar_index_free(&t);
		return 0;
	}
	text = malloc(m.n + 1);
	if (!text)
		return 0;
	memcpy(text, m.p, m.n);
	text[m.n] = '\0';
	if (data[0] == 1) {
		struct strvec v = {0};

		shards_expand(text, 256, &v);
		if (v.n > 256)
			abort();
		strvec_free(&v);
	} else {
		size_t key_len;
		const char *ext;

		if (shards_key_split(text, &key_len, &ext) && (key_len == 0 || ext != text + key_len + 1))
			abort();
	}
	free(text);
	return 0;
}
