/* SPDX-License-Identifier: MIT */
/*
 * An attach request's transform pipeline (Attach.transforms) into a parsed
 * pixels/pipeline.h pipeline: the one step from the wire to the validator.
 */
#ifndef STOKER_LOOP_TRANSFORMS_H
#define STOKER_LOOP_TRANSFORMS_H

#include <stddef.h>

#include "pipeline.h"
#include "stoker.pb-c.h"

/* 0 and *out; -EINVAL with the reason (op and parameter named) in errbuf; -ENOMEM. */
int transforms_from_proto(Stoker__TransformOp *const *ops, size_t n, struct tpipe **out, char *errbuf, size_t errlen);

#endif
