/* SPDX-License-Identifier: MIT */
#pragma once

#include <stddef.h>

/* gzip (RFC 1952) of data into a new buffer (free()), for Content-Encoding: gzip. */
int exp_gzip(const void *data, size_t size, void **ret, size_t *ret_size);

/* Inflates gzip data into a new buffer (free()); -EFBIG when the result would exceed max. */
int exp_gunzip(const void *data, size_t size, size_t max, void **ret, size_t *ret_size);
