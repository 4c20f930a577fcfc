/* SPDX-License-Identifier: MIT */
/*
 * S3 specifics over fetch.h: where credentials come from, how s3:// names
 * map to HTTP URLs, ListObjectsV2 listings, and URL text helpers shared
 * with plain HTTP data sets.
 *
 * Credentials: a client's own keys when the configuration carries them
 * (has_keys); else, first found wins (the AWS CLI's order for static keys):
 *   AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN) in the
 *   daemon's environment; then the profile (s3_profile, else AWS_PROFILE,
 *   else "default") of the shared credentials file (s3_credentials_file,
 *   else AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials). None found:
 *   requests go unsigned (public buckets).
 * Addressing: with an endpoint (s3_endpoint, else AWS_ENDPOINT_URL_S3, else
 * AWS_ENDPOINT_URL) path-style, ENDPOINT/BUCKET/KEY, as S3-compatible stores
 * want; without, AWS's virtual-hosted https://BUCKET.s3.REGION.amazonaws.com/KEY.
 * Region: s3_region, else AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1.
 */
#ifndef STOKER_S3_H
#define STOKER_S3_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fetch.h"

struct s3_config {
	char endpoint[512]; /* "" : AWS */
	char region[64];
	char profile[128];          /* "" : AWS_PROFILE or "default" */
	char credentials_file[512]; /* "" : AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials */
	/* A client's own keys, sent at attach: used instead of everything
	 * above (an empty id: unsigned). Never logged, zeroed when freed. */
	bool has_keys;
	char key_id[256], secret[256], token[2048];
};

/* Zero c, keys included (before its memory is freed). */
void s3_config_clear(struct s3_config *c);

/* Fill what the configuration left empty from the environment. */
void s3_config_resolve(struct s3_config *c);

/*
 * Credentials into auth. 1 when found (signed requests), 0 when none are
 * configured anywhere (unsigned), or -errno with a message (a named profile
 * that is missing, an unreadable file that was named explicitly).
 */
int s3_auth_load(const struct s3_config *c, struct fetch_auth *auth, char *errbuf, size_t errlen);

/* Is `s` an s3://, http:// or https:// location? */
bool url_is_remote(const char *s);

/* Split "s3://bucket/key..." into bucket and key (key may be ""). */
int s3_split(const char *url, char *bucket, size_t bucket_size, const char **key);

/* The HTTP URL of object `key` (percent-encoded here) in `bucket`. */
int s3_object_url(const struct s3_config *c, const char *bucket, const char *key, char *out, size_t size);

/* Append `s` to out percent-encoded (RFC 3986 unreserved kept; '/' kept
 * when keep_slash). -ENAMETOOLONG when it does not fit. */
int url_encode_append(char *out, size_t size, const char *s, bool keep_slash);

/* The ListObjectsV2 URL of one page: after the first, `token` is the
 * server's continuation token ("" for the first). -ENAMETOOLONG when it
 * does not fit. */
int s3_list_url(const struct s3_config *c, const char *bucket, const char *prefix, const char *token, char *out,
		size_t size);

/*
 * Every object under `prefix` of `bucket` (ListObjectsV2, page by page),
 * reported as (key, size) in the store's order. `report` returning < 0
 * stops the listing with that error. Errors carry a message: S3's own
 * (<Code>: <Message>) for a refused request.
 */
typedef int (*s3_list_fn)(void *ctx, const char *key, uint64_t size);
int s3_list(struct fetch *f, const struct s3_config *c, const struct fetch_auth *auth, const char *bucket,
	    const char *prefix, s3_list_fn report, void *ctx, char *errbuf, size_t errlen);

/*
 * One ListObjectsV2 page (untrusted XML of `len` bytes, not NUL-terminated):
 * each object to report, in order. 1 with the continuation token in token
 * when the listing goes on, 0 at its end, -EPROTO (why says what) for a
 * malformed page, or report's error.
 */
int s3_parse_list_page(const char *xml, size_t len, s3_list_fn report, void *ctx, char *token, size_t token_size,
		       char *why, size_t whylen);

/* A failed request's reason for people: S3's <Code>/<Message> from the
 * body when there is one, else fetch's message. */
void s3_error_text(const struct fetch_req *r, char *out, size_t size);

#endif
