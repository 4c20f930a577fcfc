/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: what an S3 server (or anything answering in its place)
 * sends back. The first byte picks
 *   0: the rest as a ListObjectsV2 page into s3_parse_list_page(): every
 *      key it reports must be a bounded C string, the token too;
 *   1: the rest as an error body into s3_error_text().
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "s3.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int check_key(void *ctx, const char *key, uint64_t size)
{
	size_t *n = ctx;

	if (strlen(key) >= 2048)
		abort();
	(void)size;
	return ++*n > 100000 ? -E2BIG : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char token[256], why[128], text[512];
	size_t n = 0;

	if (size == 0)
		return 0;
	/* Not NUL-terminated, as a body is not. */
	uint8_t *body = malloc(size - 1 ? size - 1 : 1);

	if (!body)
		return 0;
	memcpy(body, data + 1, size - 1);
	if (data[0] == 0) {
		if (s3_parse_list_page((const char *)body, size - 1, check_key, &n, token, sizeof(token), why,
				       sizeof(why)) == 1 &&
		    strlen(token) >= sizeof(token))
			abort();
	} else {
		struct fetch_req r = {.err = -EACCES, .status = 403, .data = body, .len = size - 1};

		snprintf(r.message, sizeof(r.message), "HTTP 403");
		s3_error_text(&r, text, sizeof(text));
		if (strlen(text) >= sizeof(text))
			abort();
	}
	free(body);
	return 0;
}
