/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdint.h>

#include "wire.h"

/* The stable name of an EP_STOP_* reason ("max-depth", ...): the keys of the loader's
 * UnwindStops property, and what views and tests print. NULL for an unknown value. */
const char *ep_stop_reason_name(uint64_t reason);
