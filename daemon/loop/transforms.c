/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "transforms.h"

int transforms_from_proto(Stoker__TransformOp *const *ops, size_t n, struct tpipe **out, char *errbuf, size_t errlen)
{
	struct tpipe_op_desc *d = NULL;
	struct op_param *q = NULL;
	size_t n_params = 0, k = 0;
	int r;

	if (n == 0 || n > TPIPE_MAX_OPS) {
		snprintf(errbuf, errlen, "a pipeline takes 1..%d transforms, not %zu", TPIPE_MAX_OPS, n);
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++) {
		if (ops[i]->n_params > TPIPE_MAX_PARAMS) {
			snprintf(errbuf, errlen, "transform %zu %.64s: more than %d parameters", i + 1, ops[i]->name,
				 TPIPE_MAX_PARAMS);
			return -EINVAL;
		}
		n_params += ops[i]->n_params;
	}
	d = calloc(n, sizeof(*d));
	q = calloc(n_params ? n_params : 1, sizeof(*q));
	if (!d || !q) {
		snprintf(errbuf, errlen, "out of memory");
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		d[i] = (struct tpipe_op_desc){.name = ops[i]->name, .params = q + k, .n_params = ops[i]->n_params};
		for (size_t j = 0; j < ops[i]->n_params; j++, k++) {
			const Stoker__TransformParam *p = ops[i]->params[j];

			q[k] = (struct op_param){.key = p->key,
						 .numbers = p->numbers,
						 .n_numbers = p->n_numbers,
						 .text = p->text};
		}
	}
	r = tpipe_parse(d, n, out, errbuf, errlen);
out:
	free(d);
	free(q);
	return r;
}
