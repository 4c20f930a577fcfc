/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>

#include "policy.h"

struct policy {
	int unused;
};

bool policy_known(const char *name)
{
	(void)name;
	return false;
}

int policy_parse(const char *name, const struct params *ps, struct policy **out)
{
	(void)name;
	(void)ps;
	(void)out;
	return -EINVAL;
}

int policy_apply(const struct policy *pol, struct rgb_image *im, struct rng *rng, struct pixel_scratch *s)
{
	(void)pol;
	(void)im;
	(void)rng;
	(void)s;
	return -EINVAL;
}

void policy_free(struct policy *pol)
{
	free(pol);
}

int policy_apply_named(const struct policy *pol, const char *spec, struct rgb_image *im, struct pixel_scratch *s,
		       char *err, size_t errlen)
{
	(void)pol;
	(void)spec;
	(void)im;
	(void)s;
	(void)err;
	(void)errlen;
	return -EINVAL;
}
