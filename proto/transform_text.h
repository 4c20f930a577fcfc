/* SPDX-License-Identifier: MIT */
/*
 * The text form of a transform pipeline (docs/transforms.md), shared by
 * libstoker (stoker_opts_set(opts, "transforms", text)) and the tests:
 *
 *   RandomResizedCrop(size=176, scale=(0.08, 1)); RandomHorizontalFlip(p=0.5);
 *   ToDtype(dtype=float32, scale=true); Normalize(mean=(0.485, 0.456, 0.406),
 *   std=(0.229, 0.224, 0.225)); RandomErasing(p=0.1, value="random")
 *
 * ops separated by ';', each a name and optional keyword parameters; a
 * value is a number, a tuple of numbers in () or [], a "quoted text" or a
 * bare word (a text; None: no value). Bounded by TransformLimits.
 */
#ifndef STOKER_TRANSFORM_TEXT_H
#define STOKER_TRANSFORM_TEXT_H

#include <stddef.h>

#include "stoker.pb-c.h"

/* Parse `text` into *n ops (malloc'd, for transform_text_free). -EINVAL
 * with the reason and its position in err; -ENOMEM. */
int transform_text_parse(const char *text, Stoker__TransformOp ***ops, size_t *n, char *err, size_t errlen);
void transform_text_free(Stoker__TransformOp **ops, size_t n);

#endif
