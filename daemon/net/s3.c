/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "s3.h"
#include "text.h"

/* ListObjectsV2 pages; 1000 keys each, so 10 million objects at most. */
#define S3_MAX_PAGES 10000

static void copy_env(char *dst, size_t size, const char *const *names)
{
	for (; *names && !dst[0]; names++) {
		const char *v = getenv(*names);

		if (v && *v)
			snprintf(dst, size, "%s", v);
	}
}

void s3_config_resolve(struct s3_config *c)
{
	copy_env(c->endpoint, sizeof(c->endpoint),
		 (const char *const[]){"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", NULL});
	copy_env(c->region, sizeof(c->region), (const char *const[]){"AWS_REGION", "AWS_DEFAULT_REGION", NULL});
	if (!c->region[0])
		snprintf(c->region, sizeof(c->region), "us-east-1");
	copy_env(c->profile, sizeof(c->profile), (const char *const[]){"AWS_PROFILE", NULL});
	copy_env(c->credentials_file, sizeof(c->credentials_file),
		 (const char *const[]){"AWS_SHARED_CREDENTIALS_FILE", NULL});
	/* A trailing slash would make ENDPOINT//BUCKET. */
	for (size_t n = strlen(c->endpoint); n > 0 && c->endpoint[n - 1] == '/'; n--)
		c->endpoint[n - 1] = '\0';
}

/* The profile's keys from an INI credentials file. 1 found, 0 no such
 * profile, -errno unreadable. */
static int read_profile(const char *path, const char *profile, char *id, char *secret, char *token, size_t size)
{
	char line[4096];
	bool in = false;
	FILE *f = fopen(path, "re");

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char *s = text_trim(line), *eq;

		if (*s == '[') {
			char *end = strchr(s, ']');

			if (end)
				*end = '\0';
			in = strcmp(text_trim(s + 1), profile) == 0;
			continue;
		}
		if (!in || *s == '#' || *s == ';' || !(eq = strchr(s, '=')))
			continue;
		*eq = '\0';
		const char *key = text_trim(s), *value = text_trim(eq + 1);

		if (strcmp(key, "aws_access_key_id") == 0)
			snprintf(id, size, "%s", value);
		else if (strcmp(key, "aws_secret_access_key") == 0)
			snprintf(secret, size, "%s", value);
		else if (strcmp(key, "aws_session_token") == 0)
			snprintf(token, size, "%s", value);
	}
	fclose(f);
	return id[0] && secret[0] ? 1 : 0;
}

void s3_config_clear(struct s3_config *c)
{
	explicit_bzero(c, sizeof(*c));
}

int s3_auth_load(const struct s3_config *c, struct fetch_auth *auth, char *errbuf, size_t errlen)
{
	char id[256] = "", secret[256] = "", token[sizeof(auth->token)] = "", path[1024];
	const char *profile = c->profile[0] ? c->profile : "default";
	const char *env_id = getenv("AWS_ACCESS_KEY_ID"), *env_secret = getenv("AWS_SECRET_ACCESS_KEY");
	int r;

	if (c->has_keys) {
		if (!c->key_id[0] || !c->secret[0])
			return 0; /* the client has none: unsigned */
		snprintf(id, sizeof(id), "%s", c->key_id);
		snprintf(secret, sizeof(secret), "%s", c->secret);
		snprintf(token, sizeof(token), "%s", c->token);
	} else if (env_id && *env_id && env_secret && *env_secret) {
		const char *t = getenv("AWS_SESSION_TOKEN");

		snprintf(id, sizeof(id), "%s", env_id);
		snprintf(secret, sizeof(secret), "%s", env_secret);
		snprintf(token, sizeof(token), "%s", t ? t : "");
	} else {
		const char *home = getenv("HOME");

		if (c->credentials_file[0])
			snprintf(path, sizeof(path), "%s", c->credentials_file);
		else if (home && *home)
			snprintf(path, sizeof(path), "%s/.aws/credentials", home);
		else
			path[0] = '\0';
		r = path[0] ? read_profile(path, profile, id, secret, token, sizeof(id)) : -ENOENT;
		if (r == -ENOENT && !c->credentials_file[0] && !c->profile[0])
			r = 0; /* nothing configured anywhere: unsigned */
		if (r < 0) {
			snprintf(errbuf, errlen, "S3 credentials: %s: %s", path, strerror(-r));
			return r;
		}
		if (r == 0 && c->profile[0]) {
			snprintf(errbuf, errlen,
				 "S3 credentials: no profile [%s] with aws_access_key_id and "
				 "aws_secret_access_key in %s",
				 profile, path);
			return -ENOENT;
		}
		if (r == 0)
			return 0;
		/* The session token is long: the buffer above holds it whole. */
		if (strlen(token) >= sizeof(auth->token)) {
			snprintf(errbuf, errlen, "S3 credentials: the session token is too long");
			return -EINVAL;
		}
	}
	if (strchr(id, ':')) {
		snprintf(errbuf, errlen, "S3 credentials: the access key id holds a ':'");
		return -EINVAL;
	}
	memset(auth, 0, sizeof(*auth));
	snprintf(auth->sigv4, sizeof(auth->sigv4), "aws:amz:%s:s3", c->region);
	snprintf(auth->userpwd, sizeof(auth->userpwd), "%s:%s", id, secret);
	snprintf(auth->token, sizeof(auth->token), "%s", token);
	return 1;
}

bool url_is_remote(const char *s)
{
	return strncmp(s, "s3://", 5) == 0 || strncasecmp(s, "http://", 7) == 0 || strncasecmp(s, "https://", 8) == 0;
}

int s3_split(const char *url, char *bucket, size_t bucket_size, const char **key)
{
	const char *b = url + 5, *slash;
	size_t n;

	if (strncmp(url, "s3://", 5) != 0)
		return -EINVAL;
	slash = strchr(b, '/');
	n = slash ? (size_t)(slash - b) : strlen(b);
	if (n == 0 || n >= bucket_size)
		return -EINVAL;
	memcpy(bucket, b, n);
	bucket[n] = '\0';
	*key = slash ? slash + 1 : b + n;
	return 0;
}

int url_encode_append(char *out, size_t size, const char *s, bool keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = strlen(out);

	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		bool plain = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
			     *p == '-' || *p == '_' || *p == '.' || *p == '~' || (keep_slash && *p == '/');

		if (n + (plain ? 1 : 3) >= size)
			return -ENAMETOOLONG;
		if (plain) {
			out[n++] = (char)*p;
		} else {
			out[n++] = '%';
			out[n++] = hex[*p >> 4];
			out[n++] = hex[*p & 15];
		}
	}
	out[n] = '\0';
	return 0;
}

int s3_object_url(const struct s3_config *c, const char *bucket, const char *key, char *out, size_t size)
{
	int n;

	if (c->endpoint[0])
		n = snprintf(out, size, "%s/%s/", c->endpoint, bucket);
	else
		n = snprintf(out, size, "https://%s.s3.%s.amazonaws.com/", bucket, c->region);
	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	return url_encode_append(out, size, key, true);
}

/* The text of the first <tag>...</tag> at or after *pos, XML entities
 * decoded, into out; *pos moves past it. false when there is none. */
static bool xml_take(const char *xml, const char *end, const char **pos, const char *tag, char *out, size_t size)
{
	char open[64], close[64];
	const char *a, *b;
	size_t n = 0;

	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	a = memmem(*pos, (size_t)(end - *pos), open, strlen(open));
	if (!a)
		return false;
	a += strlen(open);
	b = memmem(a, (size_t)(end - a), close, strlen(close));
	if (!b)
		return false;
	for (const char *p = a; p < b && n + 5 < size; p++) {
		static const struct {
			const char *name;
			char c;
		} ents[] = {{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
		bool done = false;

		if (*p == '&') {
			for (size_t i = 0; i < sizeof(ents) / sizeof(ents[0]) && !done; i++) {
				size_t len = strlen(ents[i].name);

				if ((size_t)(b - p) >= len && memcmp(p, ents[i].name, len) == 0) {
					out[n++] = ents[i].c;
					p += len - 1;
					done = true;
				}
			}
			if (!done && p + 2 < b && p[1] == '#') {
				/* &#NN; / &#xNN; as UTF-8 */
				char *semi;
				unsigned long cp = p[2] == 'x' ? strtoul(p + 3, &semi, 16) : strtoul(p + 2, &semi, 10);

				if (semi < b && *semi == ';' && cp > 0 && cp < 0x110000) {
					if (cp < 0x80) {
						out[n++] = (char)cp;
					} else if (cp < 0x800) {
						out[n++] = (char)(0xC0 | (cp >> 6));
						out[n++] = (char)(0x80 | (cp & 0x3F));
					} else if (cp < 0x10000) {
						out[n++] = (char)(0xE0 | (cp >> 12));
						out[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
						out[n++] = (char)(0x80 | (cp & 0x3F));
					} else {
						out[n++] = (char)(0xF0 | (cp >> 18));
						out[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
						out[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
						out[n++] = (char)(0x80 | (cp & 0x3F));
					}
					p = semi;
					done = true;
				}
			}
		}
		if (!done)
			out[n++] = *p;
	}
	out[n] = '\0';
	*pos = b + strlen(close);
	return true;
}

void s3_error_text(const struct fetch_req *r, char *out, size_t size)
{
	char code[128] = "", msg[512] = "";

	if (r->data && r->len && r->status >= 300) {
		const char *xml = (const char *)r->data, *end = xml + r->len, *pos = xml;

		xml_take(xml, end, &pos, "Code", code, sizeof(code));
		pos = xml;
		xml_take(xml, end, &pos, "Message", msg, sizeof(msg));
	}
	if (code[0])
		snprintf(out, size, "%s (%s%s%s)", r->message, code, msg[0] ? ": " : "", msg);
	else
		snprintf(out, size, "%s", r->message[0] ? r->message : strerror(-r->err));
}

int s3_parse_list_page(const char *xml, size_t len, s3_list_fn report, void *ctx, char *token, size_t token_size,
		       char *why, size_t whylen)
{
	const char *end, *pos;
	char key[2048], size_text[32], truncated[16];
	int r;

	if (!xml) { /* an empty body */
		xml = "";
		len = 0;
	}
	end = xml + len;
	pos = xml;

	/* Each <Contents> holds one object's <Key> and <Size>. */
	while ((pos = memmem(pos, (size_t)(end - pos), "<Contents>", 10))) {
		const char *stop = memmem(pos, (size_t)(end - pos), "</Contents>", 11), *p = pos;
		char *endp;
		unsigned long long size;

		if (!stop || !xml_take(xml, stop, &p, "Key", key, sizeof(key)) ||
		    !(p = pos, xml_take(xml, stop, &p, "Size", size_text, sizeof(size_text)))) {
			snprintf(why, whylen, "a listing entry without Key or Size");
			return -EPROTO;
		}
		errno = 0;
		size = strtoull(size_text, &endp, 10);
		if (errno || *endp || endp == size_text || size_text[0] == '-') {
			snprintf(why, whylen, "bad object size '%s'", size_text);
			return -EPROTO;
		}
		r = report(ctx, key, size);
		if (r < 0)
			return r;
		pos = stop + 11;
	}
	token[0] = '\0';
	pos = xml;
	truncated[0] = '\0';
	xml_take(xml, end, &pos, "IsTruncated", truncated, sizeof(truncated));
	if (strcmp(truncated, "true") != 0)
		return 0;
	pos = xml;
	if (!xml_take(xml, end, &pos, "NextContinuationToken", token, token_size) || !token[0]) {
		snprintf(why, whylen, "a truncated listing without a continuation token");
		return -EPROTO;
	}
	return 1;
}

/* Append s to the string in out; -ENAMETOOLONG when it does not fit. */
static int append(char *out, size_t size, const char *s)
{
	size_t n = strlen(out), len = strlen(s);

	if (n + len >= size)
		return -ENAMETOOLONG;
	memcpy(out + n, s, len + 1);
	return 0;
}

int s3_list_url(const struct s3_config *c, const char *bucket, const char *prefix, const char *token, char *out,
		size_t size)
{
	int n;

	/* Parameters in sorted order, values encoded: the canonical query
	 * SigV4 signs. Each piece is bounded: the token is the server's. */
	if (c->endpoint[0])
		n = snprintf(out, size, "%s/%s?", c->endpoint, bucket);
	else
		n = snprintf(out, size, "https://%s.s3.%s.amazonaws.com/?", bucket, c->region);
	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	if (token[0] && (append(out, size, "continuation-token=") < 0 ||
			 url_encode_append(out, size, token, false) < 0 || append(out, size, "&") < 0))
		return -ENAMETOOLONG;
	if (append(out, size, "list-type=2&prefix=") < 0)
		return -ENAMETOOLONG;
	return url_encode_append(out, size, prefix, false);
}

int s3_list(struct fetch *f, const struct s3_config *c, const struct fetch_auth *auth, const char *bucket,
	    const char *prefix, s3_list_fn report, void *ctx, char *errbuf, size_t errlen)
{
	char url[4096], token[2048] = "", why[768];
	struct fetch_req req;
	int r = 0;

	for (unsigned page = 0; page < S3_MAX_PAGES; page++) {
		r = s3_list_url(c, bucket, prefix, token, url, sizeof(url));
		if (r < 0) {
			snprintf(errbuf, errlen, "s3://%s/%s: the listing's URL is too long", bucket, prefix);
			return r;
		}
		memset(&req, 0, sizeof(req));
		req.url = url;
		req.auth = auth;
		r = fetch_sync(f, &req);
		if (r < 0) {
			s3_error_text(&req, why, sizeof(why));
			snprintf(errbuf, errlen, "s3://%s/%s: listing failed: %s", bucket, prefix, why);
			goto out;
		}
		why[0] = '\0';
		r = s3_parse_list_page((const char *)req.data, req.len, report, ctx, token, sizeof(token), why,
				       sizeof(why));
		if (r < 0 && why[0])
			snprintf(errbuf, errlen, "s3://%s/%s: %s", bucket, prefix, why);
		if (r <= 0)
			goto out;
		free(req.data);
		req.data = NULL;
	}
	snprintf(errbuf, errlen, "s3://%s/%s: more than %u listing pages", bucket, prefix, S3_MAX_PAGES);
	return -EFBIG;
out:
	free(req.data);
	return r;
}
