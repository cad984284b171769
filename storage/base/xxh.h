// Internal: the one place that includes xxHash. On x86-64 the XXH3 entry points
// are replaced by the system library's runtime-dispatched (SSE2/AVX2/AVX-512)
// versions; XXH3_state_t is usable on the stack.
#pragma once

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>
#endif
