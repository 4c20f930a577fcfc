/* SPDX-License-Identifier: MIT */
/* S3 naming, addressing, credentials and error texts (the listing itself
 * is tested against a real S3 server in tests/network). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "s3.h"

static void clear_env(void)
{
	static const char *const names[] = {
		"AWS_ACCESS_KEY_ID",           "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",   "AWS_PROFILE",
		"AWS_SHARED_CREDENTIALS_FILE", "AWS_ENDPOINT_URL",      "AWS_ENDPOINT_URL_S3", "AWS_REGION",
		"AWS_DEFAULT_REGION"};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		unsetenv(names[i]);
}

static void test_split_and_urls(void **state)
{
	struct s3_config c = {0};
	char bucket[64], url[256];
	const char *key;

	(void)state;
	assert_int_equal(s3_split("s3://photos/train/a b.jpg", bucket, sizeof(bucket), &key), 0);
	assert_string_equal(bucket, "photos");
	assert_string_equal(key, "train/a b.jpg");
	assert_int_equal(s3_split("s3://photos", bucket, sizeof(bucket), &key), 0);
	assert_string_equal(key, "");
	assert_int_equal(s3_split("s3:///x", bucket, sizeof(bucket), &key), -EINVAL);
	assert_int_equal(s3_split("http://x/y", bucket, sizeof(bucket), &key), -EINVAL);

	clear_env();
	s3_config_resolve(&c);
	assert_string_equal(c.region, "us-east-1");
	assert_int_equal(s3_object_url(&c, "photos", "train/a b+c%.jpg", url, sizeof(url)), 0);
	assert_string_equal(url, "https://photos.s3.us-east-1.amazonaws.com/train/a%20b%2Bc%25.jpg");

	setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000//", 1);
	setenv("AWS_REGION", "eu-west-3", 1);
	memset(&c, 0, sizeof(c));
	s3_config_resolve(&c);
	assert_string_equal(c.endpoint, "http://127.0.0.1:9000");
	assert_string_equal(c.region, "eu-west-3");
	assert_int_equal(s3_object_url(&c, "photos", "ü/x.jpg", url, sizeof(url)), 0);
	assert_string_equal(url, "http://127.0.0.1:9000/photos/%C3%BC/x.jpg");
	/* The configuration wins over the environment. */
	memset(&c, 0, sizeof(c));
	snprintf(c.endpoint, sizeof(c.endpoint), "https://minio:9000");
	s3_config_resolve(&c);
	assert_string_equal(c.endpoint, "https://minio:9000");
	assert_int_equal(s3_object_url(&c, "b", "k", url, 12), -ENAMETOOLONG);
	clear_env();

	assert_true(url_is_remote("s3://b/k"));
	assert_true(url_is_remote("HTTPS://h/x"));
	assert_false(url_is_remote("/data/s3://x"));
	assert_false(url_is_remote("ftp://h/x"));
}

static char *write_temp(const char *text)
{
	char *path = strdup("/tmp/stoker-test-s3-XXXXXX");
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static void test_credentials(void **state)
{
	struct s3_config c = {0};
	struct fetch_auth auth;
	char err[512] = "";
	char *file = write_temp("# comment\n[default]\naws_access_key_id = AKDEFAULT\n"
				"aws_secret_access_key=secret/default\n\n"
				"[ training ]\n aws_access_key_id = AKTRAIN \naws_secret_access_key = s2\n"
				"aws_session_token = tok==\n[broken]\naws_access_key_id = AKONLY\n");

	(void)state;
	clear_env();
	/* Nothing anywhere: unsigned. */
	setenv("HOME", "/nonexistent-home", 1);
	s3_config_resolve(&c);
	assert_int_equal(s3_auth_load(&c, &auth, err, sizeof(err)), 0);

	/* The file's default profile. */
	snprintf(c.credentials_file, sizeof(c.credentials_file), "%s", file);
	assert_int_equal(s3_auth_load(&c, &auth, err, sizeof(err)), 1);
	assert_string_equal(auth.userpwd, "AKDEFAULT:secret/default");
	assert_string_equal(auth.sigv4, "aws:amz:us-east-1:s3");
	assert_string_equal(auth.token, "");

	/* A named profile, with its session token. */
	snprintf(c.profile, sizeof(c.profile), "training");
	assert_int_equal(s3_auth_load(&c, &auth, err, sizeof(err)), 1);
	assert_string_equal(auth.userpwd, "AKTRAIN:s2");
	assert_string_equal(auth.token, "tok==");

	/* A profile without both keys, or none at all, is an error that says so. */
	snprintf(c.profile, sizeof(c.profile), "broken");
	assert_int_equal(s3_auth_load(&c, &auth, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "[broken]"));
	snprintf(c.profile, sizeof(c.profile), "absent");
	assert_int_equal(s3_auth_load(&c, &auth, err, sizeof(err)), -ENOENT);

	/* The environment's keys come first. */
	setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	setenv("AWS_SESSION_TOKEN", "envtok", 1);
	assert_int_equal(s3_auth_load(&c, &auth, err, sizeof(err)), 1);
	assert_string_equal(auth.userpwd, "AKENV:envsecret");
	assert_string_equal(auth.token, "envtok");
	clear_env();

	/* A named file that cannot be read. */
	memset(&c, 0, sizeof(c));
	snprintf(c.credentials_file, sizeof(c.credentials_file), "/nonexistent/credentials");
	s3_config_resolve(&c);
	assert_int_equal(s3_auth_load(&c, &auth, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "/nonexistent/credentials"));
	unlink(file);
	free(file);
}

static void test_error_text(void **state)
{
	static const char xml[] = "<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code>"
				  "<Message>Access &amp; such &lt;denied&gt; &#233;&#x20AC;</Message></Error>";
	struct fetch_req r = {.err = -EACCES, .status = 403, .data = (uint8_t *)xml, .len = sizeof(xml) - 1};
	char out[512];

	(void)state;
	snprintf(r.message, sizeof(r.message), "HTTP 403");
	s3_error_text(&r, out, sizeof(out));
	assert_string_equal(out, "HTTP 403 (AccessDenied: Access & such <denied> \xc3\xa9\xe2\x82\xac)");
	/* Not XML: fetch's own message. */
	r.len = 3;
	r.data = (uint8_t *)"no\n";
	s3_error_text(&r, out, sizeof(out));
	assert_string_equal(out, "HTTP 403");
	r.data = NULL;
	r.len = 0;
	r.message[0] = '\0';
	r.err = -ETIMEDOUT;
	s3_error_text(&r, out, sizeof(out));
	assert_string_equal(out, strerror(ETIMEDOUT));
}

struct listed_keys {
	char keys[8][64];
	uint64_t sizes[8];
	unsigned n;
};

static int collect(void *ctx, const char *key, uint64_t size)
{
	struct listed_keys *l = ctx;

	if (l->n == 8)
		return -E2BIG;
	snprintf(l->keys[l->n], sizeof(l->keys[0]), "%s", key);
	l->sizes[l->n++] = size;
	return 0;
}

static int page(const char *xml, struct listed_keys *l, char *token, char *why)
{
	memset(l, 0, sizeof(*l));
	return s3_parse_list_page(xml, strlen(xml), collect, l, token, 64, why, 128);
}

static void test_list_page(void **state)
{
	struct listed_keys l;
	char token[64], why[128];

	(void)state;
	assert_int_equal(page("<ListBucketResult><IsTruncated>true</IsTruncated>"
			      "<Contents><Key>train/a &amp; b.jpg</Key><LastModified>x</LastModified><Size>12</Size>"
			      "</Contents><Contents><Size>7</Size><Key>train/c.jpg</Key></Contents>"
			      "<NextContinuationToken>1/x+y==</NextContinuationToken></ListBucketResult>",
			      &l, token, why),
			 1);
	assert_int_equal(l.n, 2);
	assert_string_equal(l.keys[0], "train/a & b.jpg");
	assert_int_equal(l.sizes[0], 12);
	assert_string_equal(l.keys[1], "train/c.jpg");
	assert_int_equal(l.sizes[1], 7);
	assert_string_equal(token, "1/x+y==");
	/* The last page, and an empty one. */
	assert_int_equal(page("<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>", &l, token, why),
			 0);
	assert_int_equal(l.n, 0);
	assert_int_equal(s3_parse_list_page(NULL, 0, collect, &l, token, 64, why, 128), 0);
	/* Malformed: no size, a negative or non-numeric one, a truncated
	 * listing without its token, an entry cut off. */
	assert_int_equal(page("<Contents><Key>a</Key></Contents>", &l, token, why), -EPROTO);
	assert_non_null(strstr(why, "without Key or Size"));
	assert_int_equal(page("<Contents><Key>a</Key><Size>-1</Size></Contents>", &l, token, why), -EPROTO);
	assert_int_equal(page("<Contents><Key>a</Key><Size>1e3</Size></Contents>", &l, token, why), -EPROTO);
	assert_int_equal(page("<Contents><Key>a</Key><Size></Size></Contents>", &l, token, why), -EPROTO);
	assert_int_equal(page("<IsTruncated>true</IsTruncated>", &l, token, why), -EPROTO);
	assert_non_null(strstr(why, "continuation token"));
	assert_int_equal(page("<Contents><Key>a</Key><Size>1", &l, token, why), -EPROTO);
	/* The reporter's error stops the page. */
	assert_int_equal(page("<Contents><Key>1</Key><Size>1</Size></Contents><Contents><Key>2</Key><Size>1</Size>"
			      "</Contents><Contents><Key>3</Key><Size>1</Size></Contents><Contents><Key>4</Key>"
			      "<Size>1</Size></Contents><Contents><Key>5</Key><Size>1</Size></Contents><Contents>"
			      "<Key>6</Key><Size>1</Size></Contents><Contents><Key>7</Key><Size>1</Size></Contents>"
			      "<Contents><Key>8</Key><Size>1</Size></Contents><Contents><Key>9</Key><Size>1</Size>"
			      "</Contents>",
			      &l, token, why),
			 -E2BIG);
}

static void test_encode(void **state)
{
	char buf[32] = "x=";

	(void)state;
	assert_int_equal(url_encode_append(buf, sizeof(buf), "a/b c~", false), 0);
	assert_string_equal(buf, "x=a%2Fb%20c~");
	buf[0] = '\0';
	assert_int_equal(url_encode_append(buf, sizeof(buf), "a/b", true), 0);
	assert_string_equal(buf, "a/b");
	buf[0] = '\0';
	assert_int_equal(url_encode_append(buf, 8, "\xff\xff\xff", false), -ENAMETOOLONG);
}

static void test_list_url(void **state)
{
	struct s3_config c = {0};
	struct {
		char url[128];
		char guard[64];
	} b;
	char token[128];
	size_t head;

	(void)state;
	snprintf(c.endpoint, sizeof(c.endpoint), "http://h");
	snprintf(c.region, sizeof(c.region), "us-east-1");
	assert_int_equal(s3_list_url(&c, "b", "p/q", "", b.url, sizeof(b.url)), 0);
	assert_string_equal(b.url, "http://h/b?list-type=2&prefix=p%2Fq");
	assert_int_equal(s3_list_url(&c, "b", "", "1/x", b.url, sizeof(b.url)), 0);
	assert_string_equal(b.url, "http://h/b?continuation-token=1%2Fx&list-type=2&prefix=");
	/* A (server's) token whose encoding fills the buffer exactly: the
	 * pieces after it must not be written past its end. */
	head = strlen("http://h/b?continuation-token=");
	memset(token, 'a', sizeof(b.url) - 1 - head);
	token[sizeof(b.url) - 1 - head] = '\0';
	memset(b.guard, 'G', sizeof(b.guard));
	assert_int_equal(s3_list_url(&c, "b", "", token, b.url, sizeof(b.url)), -ENAMETOOLONG);
	for (size_t i = 0; i < sizeof(b.guard); i++)
		assert_int_equal(b.guard[i], 'G');
	assert_int_equal(s3_list_url(&c, "b", "", "", b.url, 20), -ENAMETOOLONG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_split_and_urls), cmocka_unit_test(test_credentials),
		cmocka_unit_test(test_error_text),     cmocka_unit_test(test_list_page),
		cmocka_unit_test(test_encode),         cmocka_unit_test(test_list_url),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
