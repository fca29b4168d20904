/* SPDX-License-Identifier: MIT */
#pragma once

#include <stddef.h>

/* gzip (RFC 1952) of data into a new buffer (free()), for Content-Encoding: gzip. */
int exp_gzip(const void *data, size_t size, void **ret, size_t *ret_size);
